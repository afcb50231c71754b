// `strata report`'s page (report.h): HTML with inline SVG charts and CSS; no script, nothing loaded from elsewhere.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "cli/report.h"

namespace strata::cli {

namespace {

constexpr const char* kRunColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
// The spans strata records, in the order a step runs them, each with its colour in every bar; others follow in the
// order they appear, coloured from kOtherColors.
constexpr std::pair<const char*, const char*> kStepParts[] = {
    {"input wait", "#4e79a7"},   {"forward", "#f28e2b"},          {"backward", "#e15759"},
    {"optimizer", "#76b7b2"},    {"gradient wait", "#edc948"},    {"all_reduce", "#b07aa1"},
    {"ps pull", "#9c755f"},      {"ps pull rows", "#9c755f"},     {"ps push", "#ff9da7"},
    {"ps push rows", "#ff9da7"}, {"checkpoint write", "#59a14f"}, {"other", "#bab0ac"}};
constexpr const char* kOtherColors[] = {"#17becf", "#bcbd22", "#7f7f7f", "#8c564b", "#e377c2"};
constexpr int kChartWidth = 440, kChartHeight = 250;

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v, int digits = 4) {
  char buf[48];
  if (v != 0 && (std::fabs(v) >= 1e7 || std::fabs(v) < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  } else if (std::fabs(v) >= 1000) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // 15000, not 1.5e+04
  } else {
    std::snprintf(buf, sizeof buf, "%.*g", digits + (std::fabs(v) >= 10 ? 1 : 0), v);
  }
  return buf;
}

// Tick values: about `n` round numbers spanning [lo, hi]. Each is computed from its index, and at most 2n + 2 are
// made: where the step is below the values' resolution (values one double apart), adding it would not move t, and a
// loop of t += step would never end.
std::vector<double> ticks(double lo, double hi, int n) {
  if (hi <= lo) return {lo};
  const double raw = (hi - lo) / n;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> out;
  const double first = std::ceil(lo / step) * step;
  for (int i = 0; i <= 2 * n + 1; ++i) {
    const double t = first + i * step;
    if (t > hi + step * 1e-9) break;
    if (out.empty() || t != out.back()) out.push_back(t);
  }
  return out;
}

struct Line {
  std::string label;
  std::string color;
  bool dashed = false;
  Series points;
};

// A line chart of `lines` over the epochs (x = step + 1, as the progress bar counts epochs).
std::string line_chart(const std::string& title, const std::vector<Line>& lines, const std::string& x_label) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (const Line& l : lines) {
    for (const auto& [x, y] : l.points) {
      if (!std::isfinite(y)) continue;
      x_lo = std::min(x_lo, static_cast<double>(x + 1));
      x_hi = std::max(x_hi, static_cast<double>(x + 1));
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  }
  std::string svg = "<figure class=\"chart\"><figcaption>" + escape(title) + "</figcaption>";
  svg += "<svg width=\"" + std::to_string(kChartWidth) + "\" height=\"" + std::to_string(kChartHeight) +
         "\" viewBox=\"0 0 " + std::to_string(kChartWidth) + " " + std::to_string(kChartHeight) + "\" role=\"img\">";
  if (!std::isfinite(x_lo)) return svg + "<text x=\"20\" y=\"40\">no values</text></svg></figure>";
  if (x_hi == x_lo) x_hi = x_lo + 1;
  if (y_hi == y_lo) {
    y_hi += std::max(1e-6, std::fabs(y_hi) * 0.05);
    y_lo -= std::max(1e-6, std::fabs(y_lo) * 0.05);
  }
  const double pad = (y_hi - y_lo) * 0.05;
  y_lo -= pad;
  y_hi += pad;
  const double left = 58, right = kChartWidth - 12, top = 10, bottom = kChartHeight - 36;
  auto px = [&](double x) { return left + (x - x_lo) / (x_hi - x_lo) * (right - left); };
  auto py = [&](double y) { return bottom - (y - y_lo) / (y_hi - y_lo) * (bottom - top); };
  char buf[256];
  for (double t : ticks(y_lo, y_hi, 5)) {
    if (std::fabs(t) < (y_hi - y_lo) * 1e-9) t = 0;  // not "-0"
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "class=\"tick\" text-anchor=\"end\">",
                  left, py(t), right, py(t), left - 5, py(t) + 4);
    svg += buf + number(t, 3) + "</text>";
  }
  // (The count is taken as a double first: steps far apart, from another writer's file, do not fit an int.)
  for (const double t : ticks(x_lo, x_hi, static_cast<int>(std::min(8.0, x_hi - x_lo + 1)))) {
    if (std::fabs(t - std::round(t)) > 1e-9) continue;  // whole epochs only
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "class=\"tick\" text-anchor=\"middle\">%.0f</text>",
                  px(t), bottom, px(t), bottom + 4, px(t), bottom + 16, t);
    svg += buf;
  }
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/><line x1=\"%.1f\" y1=\"%.1f\" "
                "x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/><text x=\"%.1f\" y=\"%.1f\" class=\"tick\" "
                "text-anchor=\"middle\">",
                left, bottom, right, bottom, left, top, left, bottom, (left + right) / 2, bottom + 31);
  svg += buf + escape(x_label) + "</text>";
  for (const Line& l : lines) {
    std::string points;
    for (const auto& [x, y] : l.points) {
      if (!std::isfinite(y)) continue;
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(static_cast<double>(x + 1)), py(y));
      points += buf;
    }
    svg += "<polyline fill=\"none\" stroke=\"" + l.color + "\" stroke-width=\"2\"" +
           (l.dashed ? " stroke-dasharray=\"6 4\"" : "") + " points=\"" + points + "\"/>";
    for (const auto& [x, y] : l.points) {
      if (!std::isfinite(y)) continue;
      std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\">",
                    px(static_cast<double>(x + 1)), py(y), l.color.c_str());
      svg += buf + std::string("<title>") + escape(l.label) + ", " + x_label + " " + std::to_string(x + 1) + ": " +
             number(y, 5) + "</title></circle>";
    }
  }
  svg += "</svg><div class=\"legend\">";
  for (const Line& l : lines) {
    svg += "<span><svg width=\"24\" height=\"10\"><line x1=\"0\" y1=\"5\" x2=\"24\" y2=\"5\" stroke=\"" + l.color +
           "\" stroke-width=\"2\"" + (l.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/></svg> " + escape(l.label) +
           "</span>";
  }
  return svg + "</div></figure>";
}

// The quantities to chart, in page order: a tag of the train run (the validation run's is charted beside it), its
// title, and whether it is one of the job's metrics (which the summary table lists).
struct Quantity {
  std::string tag, title;
  bool metric = false;
};

std::vector<Quantity> quantities(const std::vector<RunData>& runs) {
  std::vector<Quantity> out = {{"epoch_loss", "loss"}};
  std::set<std::string> metrics;
  static const std::set<std::string> kSystem = {"epoch_loss", "epoch_learning_rate", "epoch_examples_per_second",
                                                "epoch_input_wait_percent", "epoch_communication_seconds"};
  for (const RunData& r : runs) {
    for (const auto& [tag, series] : r.train)
      if (tag.rfind("epoch_", 0) == 0 && !kSystem.count(tag)) metrics.insert(tag);
  }
  for (const std::string& m : metrics) out.push_back({m, m.substr(6), /*metric=*/true});
  out.push_back({"epoch_examples_per_second", "throughput (examples/s)"});
  out.push_back({"epoch_input_wait_percent", "input wait (% of the epoch)"});
  out.push_back({"epoch_communication_seconds", "communication (s per epoch, collectives run)"});
  out.push_back({"epoch_learning_rate", "learning rate"});
  return out;
}

bool any_values(const std::vector<RunData>& runs, const std::string& tag) {
  return std::any_of(runs.begin(), runs.end(), [&](const RunData& r) { return r.train.count(tag) > 0; });
}

std::vector<Line> lines_of(const RunData& run, const std::string& tag, const std::string& color, bool with_name) {
  std::vector<Line> lines;
  const std::string prefix = with_name ? run.name + " " : "";
  if (auto it = run.train.find(tag); it != run.train.end())
    lines.push_back({prefix + "train", color, false, it->second});
  if (auto it = run.validation.find(tag); it != run.validation.end())
    lines.push_back({prefix + "validation", color, true, it->second});
  return lines;
}

std::string last_value(const std::map<std::string, Series>& scalars, const std::string& tag) {
  const auto it = scalars.find(tag);
  return it == scalars.end() || it->second.empty() ? "&ndash;" : number(it->second.back().second);
}

std::string mean_value(const std::map<std::string, Series>& scalars, const std::string& tag) {
  const auto it = scalars.find(tag);
  if (it == scalars.end() || it->second.empty()) return "&ndash;";
  double sum = 0;
  for (const auto& [step, v] : it->second) sum += v;
  return number(sum / static_cast<double>(it->second.size()));
}

std::string summary_table(const std::vector<RunData>& runs, const std::vector<Quantity>& qs) {
  const bool validated = std::any_of(runs.begin(), runs.end(), [](const RunData& r) { return !r.validation.empty(); });
  std::string html = "<table><tr><th>run</th><th>epochs</th><th>loss</th>";
  if (validated) html += "<th>val loss</th>";
  std::vector<std::string> metrics;
  for (const Quantity& q : qs) {
    if (!q.metric) continue;
    metrics.push_back(q.tag);
    html += "<th>" + escape(q.title) + "</th>";
    if (validated) html += "<th>val " + escape(q.title) + "</th>";
  }
  html += "<th>examples/s (mean)</th><th>input wait % (mean)</th><th>communication s/epoch (mean)</th></tr>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const auto loss = r.train.find("epoch_loss");
    const size_t epochs = loss == r.train.end() ? 0 : loss->second.size();
    html += "<tr><td><span class=\"swatch\" style=\"background:" + std::string(kRunColors[i % std::size(kRunColors)]) +
            "\"></span>" + escape(r.name) + "</td><td>" + std::to_string(epochs) + "</td><td>" +
            last_value(r.train, "epoch_loss") + "</td>";
    if (validated) html += "<td>" + last_value(r.validation, "epoch_loss") + "</td>";
    for (const std::string& m : metrics) {
      html += "<td>" + last_value(r.train, m) + "</td>";
      if (validated) html += "<td>" + last_value(r.validation, m) + "</td>";
    }
    html += "<td>" + mean_value(r.train, "epoch_examples_per_second") + "</td><td>" +
            mean_value(r.train, "epoch_input_wait_percent") + "</td><td>" +
            mean_value(r.train, "epoch_communication_seconds") + "</td></tr>";
  }
  return html + "</table>";
}

// One stacked bar per process: its step time split by what the step threads did, and the background threads'
// spans beside it (they overlap the step).
std::string breakdown_section(const RunData& run) {
  if (run.breakdown.empty()) return "";
  std::string html = "<h3>" + escape(run.name) + ": time per step</h3>";
  double widest = 0;
  for (const StepBreakdown& b : run.breakdown) widest = std::max(widest, b.step_ms);
  if (widest <= 0) return html + "<p>The trace holds no training steps.</p>";
  std::vector<std::string> names;  // the known parts in step order, then the others as they appear
  for (const auto& [known, color] : kStepParts)
    for (const StepBreakdown& b : run.breakdown)
      if (std::any_of(b.step_parts.begin(), b.step_parts.end(), [&](const auto& p) { return p.first == known; })) {
        names.push_back(known);
        break;
      }
  for (const StepBreakdown& b : run.breakdown)
    for (const auto& [name, ms] : b.step_parts)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::vector<std::string> unknown;
  auto color_of = [&](const std::string& name) {
    for (const auto& [known, color] : kStepParts)
      if (name == known) return std::string(color);
    auto it = std::find(unknown.begin(), unknown.end(), name);
    if (it == unknown.end()) it = unknown.insert(unknown.end(), name);
    return std::string(kOtherColors[static_cast<size_t>(it - unknown.begin()) % std::size(kOtherColors)]);
  };
  constexpr double kBarWidth = 640, kLabel = 110;
  char buf[320];
  for (const StepBreakdown& b : run.breakdown) {
    html += "<div class=\"bar\"><svg width=\"" + std::to_string(static_cast<int>(kLabel + kBarWidth + 10)) +
            "\" height=\"30\"><text x=\"0\" y=\"19\" class=\"tick\">" + escape(b.process) + "</text>";
    double x = kLabel;
    std::vector<std::pair<std::string, double>> parts = b.step_parts;  // in the legend's order
    std::stable_sort(parts.begin(), parts.end(), [&](const auto& l, const auto& r) {
      return std::find(names.begin(), names.end(), l.first) < std::find(names.begin(), names.end(), r.first);
    });
    for (const auto& [name, ms] : parts) {
      const double w = ms / widest * kBarWidth;
      std::snprintf(buf, sizeof buf, "<rect x=\"%.1f\" y=\"4\" width=\"%.1f\" height=\"22\" fill=\"%s\"><title>", x, w,
                    color_of(name).c_str());
      html += buf + escape(name) + ": " + number(ms, 3) + " ms per step</title></rect>";
      if (w > 60) {
        std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"19\" class=\"inbar\">", x + 4);
        html += buf + escape(name) + " " + number(ms, 3) + "</text>";
      }
      x += w;
    }
    html += "</svg><div class=\"note\">" + std::to_string(b.steps) + " steps traced, " + number(b.step_ms, 4) +
            " ms per step";
    for (const auto& [name, ms] : b.background)
      html += "; beside the steps, on another thread: " + escape(name) + " " + number(ms, 3) + " ms per step";
    html += "</div></div>";
  }
  html += "<div class=\"legend\">";
  for (const std::string& name : names)
    html +=
        "<span><span class=\"swatch\" style=\"background:" + color_of(name) + "\"></span>" + escape(name) + "</span>";
  return html + "</div>";
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; } h3 { font-size: 15px; }
.sub { color: #666; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; } th, td { border: 1px solid #ddd; padding: 4px 8px; }
th { background: #f4f4f4; } td { text-align: right; } td:first-child { text-align: left; }
.grid-runs { display: flex; flex-wrap: wrap; gap: 24px; } .run-column { display: flex; flex-direction: column; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
figure.chart { margin: 0; border: 1px solid #e4e4e4; padding: 6px; }
figcaption { font-size: 13px; font-weight: bold; margin-bottom: 2px; }
.grid { stroke: #eee; } .axis { stroke: #888; } .tick { font-size: 11px; fill: #555; }
.inbar { font-size: 11px; fill: #fff; } .legend { font-size: 12px; display: flex; gap: 12px; flex-wrap: wrap; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
.note { font-size: 12px; color: #555; margin: 0 0 8px 110px; }
)";

}  // namespace

std::string report_html(const std::vector<RunData>& runs, bool compare) {
  std::string names;
  for (const RunData& r : runs) names += (names.empty() ? "" : ", ") + r.name;
  const std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>strata report: " + escape(names) +
      "</title><style>" + kStyle + "</style></head><body>";
  html += "<h1>strata report: " + escape(names) + "</h1><div class=\"sub\">" +
          (compare ? std::string("runs overlaid") : std::string("runs side by side")) +
          "; solid lines: training, dashed: validation; x: epochs; made " + when + "</div>";
  const std::vector<Quantity> qs = quantities(runs);
  html += "<h2>Summary (last epoch)</h2>" + summary_table(runs, qs);
  html += "<h2>Curves per epoch</h2>";
  if (compare) {
    html += "<div class=\"charts\">";
    for (const Quantity& q : qs) {
      if (!any_values(runs, q.tag)) continue;
      std::vector<Line> lines;
      for (size_t i = 0; i < runs.size(); ++i) {
        const std::vector<Line> mine = lines_of(runs[i], q.tag, kRunColors[i % std::size(kRunColors)], true);
        lines.insert(lines.end(), mine.begin(), mine.end());
      }
      html += line_chart(q.title, lines, "epoch");
    }
    html += "</div>";
  } else {
    html += "<div class=\"grid-runs\">";
    for (size_t i = 0; i < runs.size(); ++i) {
      html += "<div class=\"run-column\"><h3>" + escape(runs[i].name) + "</h3>";
      for (const Quantity& q : qs) {
        if (!runs[i].train.count(q.tag)) continue;
        html += line_chart(q.title, lines_of(runs[i], q.tag, kRunColors[i % std::size(kRunColors)], false), "epoch");
      }
      html += "</div>";
    }
    html += "</div>";
  }
  std::string breakdowns;
  for (const RunData& r : runs) breakdowns += breakdown_section(r);
  html += "<h2>Where a step's time goes</h2>";
  html += breakdowns.empty() ? "<p>No trace in these runs: train with <code>--trace RUN_DIR/trace.json</code> to see "
                               "one.</p>"
                             : breakdowns;
  return html + "</body></html>\n";
}

}  // namespace strata::cli
