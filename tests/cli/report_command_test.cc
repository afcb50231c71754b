// `strata report`: the page of real runs (one_device against mirrored, each with TensorBoard files and a trace) is
// one self-contained HTML file with a chart per quantity and the step breakdown; --compare overlays the runs; a
// folder without event files is named. The breakdown's arithmetic is checked on a trace written here.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/cli_test_util.h"
#include "cli/report.h"
#include "strata/error.h"

namespace strata::cli {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ReportCommandTest, APageOfTwoRunsSideBySideAndOverlaid) {
  TinyJob t("report");
  const fs::path one = t.s.dir / "one_device", two = t.s.dir / "mirrored";
  for (const auto& [dir, strategy] : {std::pair{one, "one_device"}, std::pair{two, "mirrored --replicas 2"}}) {
    auto [rc, out] =
        run(std::string(STRATA_BINARY) + " train " + t.job + " --epochs 3 --verbose 0 --strategy " + strategy +
            " --log-dir " + dir.string() + " --trace " + (dir / "trace.json").string() + " --trace-steps 2:12");
    ASSERT_EQ(rc, 0) << out;
  }
  const fs::path page = t.s.dir / "page.html";
  auto [rc, out] =
      run(std::string(STRATA_BINARY) + " report " + one.string() + " " + two.string() + " -o " + page.string());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("report: " + page.string() + " (2 runs, 2 traces)"), std::string::npos) << out;
  const std::string html = read_file(page);
  // Self-contained: nothing to fetch, no script.
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(html, "<script"), 0);
  EXPECT_EQ(count(html, "http:"), 0);
  EXPECT_EQ(count(html, "https:"), 0);
  EXPECT_EQ(count(html, "src="), 0);
  EXPECT_EQ(count(html, "<link"), 0);
  EXPECT_EQ(html.substr(html.size() - 15), "</body></html>\n");
  // A column per run, each with loss, accuracy, throughput, input wait and learning rate charts of 3 epochs.
  EXPECT_GE(count(html, ">one_device<"), 1);
  EXPECT_GE(count(html, ">mirrored<"), 1);
  EXPECT_EQ(count(html, "<figcaption>loss</figcaption>"), 2);
  EXPECT_EQ(count(html, "<figcaption>accuracy</figcaption>"), 2);
  EXPECT_EQ(count(html, "<figcaption>throughput (examples/s)</figcaption>"), 2);
  EXPECT_EQ(count(html, "<figcaption>input wait (% of the epoch)</figcaption>"), 2);
  EXPECT_EQ(count(html, "<polyline"), 2 * 5);
  EXPECT_EQ(count(html, "<circle"), 2 * 5 * 3);
  // The breakdown: forward and backward on the step threads of both runs, each bar titled in ms per step.
  EXPECT_NE(html.find("one_device: time per step"), std::string::npos);
  EXPECT_NE(html.find("mirrored: time per step"), std::string::npos);
  EXPECT_GE(count(html, "<title>forward: "), 2);
  EXPECT_GE(count(html, "<title>backward: "), 2);
  EXPECT_GE(count(html, "10 steps traced"), 2);

  const fs::path overlaid = t.s.dir / "compare.html";
  std::tie(rc, out) = run(std::string(STRATA_BINARY) + " report --compare " + one.string() + " " + two.string() +
                          " -o " + overlaid.string());
  ASSERT_EQ(rc, 0) << out;
  const std::string compared = read_file(overlaid);
  EXPECT_EQ(count(compared, "<figcaption>loss</figcaption>"), 1) << "one chart, both runs in it";
  EXPECT_EQ(count(compared, "<polyline"), 5 * 2);
  EXPECT_NE(compared.find("one_device train"), std::string::npos);
  EXPECT_NE(compared.find("mirrored train"), std::string::npos);
}

TEST(ReportCommandTest, AFolderWithoutEventFilesIsNamed) {
  Scratch s("report_empty");
  auto [rc, out] = run(std::string(STRATA_BINARY) + " report " + s.dir.string() + " -o " + (s.dir / "x.html").string());
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("holds no TensorBoard event files"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(s.dir / "x.html"));
}

// Step thread 1: two steps of forward 2 ms, backward 10 ms with an optimizer update of 2 ms nested in it, 1 ms of
// nothing; thread 2 runs an all_reduce of 3 ms per step beside it.
TEST(ReportCommandTest, TheBreakdownCountsEachSpansOwnTimeAndTheRestAsOther) {
  Scratch s("report_breakdown");
  const fs::path trace = s.dir / "t.json";
  std::ofstream(trace) << R"({"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"args":{"name":"worker:1"}},
{"name":"forward","ph":"X","ts":0,"dur":2000,"pid":1,"tid":1,"args":{"step":4}},
{"name":"backward","ph":"X","ts":2000,"dur":10000,"pid":1,"tid":1,"args":{"step":4}},
{"name":"optimizer","ph":"X","ts":5000,"dur":2000,"pid":1,"tid":1,"args":{"step":4}},
{"name":"all_reduce","ph":"X","ts":4000,"dur":3000,"pid":1,"tid":2,"args":{"step":4}},
{"name":"forward","ph":"X","ts":13000,"dur":2000,"pid":1,"tid":1,"args":{"step":5}},
{"name":"backward","ph":"X","ts":15000,"dur":10000,"pid":1,"tid":1,"args":{"step":5}},
{"name":"optimizer","ph":"X","ts":20000,"dur":2000,"pid":1,"tid":1,"args":{"step":5}},
{"name":"all_reduce","ph":"X","ts":17000,"dur":3000,"pid":1,"tid":2,"args":{"step":5}},
{"name":"input wait","ph":"X","ts":25000,"dur":1000,"pid":1,"tid":1,"args":{"step":6}}
]})";
  const StepBreakdown b = step_breakdown_of_trace(trace.string());
  EXPECT_EQ(b.process, "worker:1");
  EXPECT_EQ(b.steps, 3);
  EXPECT_NEAR(b.step_ms, 26.0 / 3, 1e-9);
  std::map<std::string, double> parts(b.step_parts.begin(), b.step_parts.end());
  EXPECT_NEAR(parts["forward"], 4.0 / 3, 1e-9);
  EXPECT_NEAR(parts["backward"], 16.0 / 3, 1e-9) << "less the nested optimizer";
  EXPECT_NEAR(parts["optimizer"], 4.0 / 3, 1e-9);
  EXPECT_NEAR(parts["input wait"], 1.0 / 3, 1e-9);
  EXPECT_NEAR(parts["other"], 1.0 / 3, 1e-9) << "the 1 ms between the steps";
  EXPECT_EQ(b.step_parts.back().first, "other");
  ASSERT_EQ(b.background.size(), 1u);
  EXPECT_EQ(b.background[0].first, "all_reduce");
  EXPECT_NEAR(b.background[0].second, 2.0, 1e-9);

  std::ofstream(s.dir / "bad.json") << "{\"traceEvents\": 5}";
  EXPECT_THROW(step_breakdown_of_trace((s.dir / "bad.json").string()), DataCorrupt);
}

// Any *.json in a run folder that looks like a trace is read: events of the wrong shape are DataCorrupt naming the
// file, and a process_name event without its args keeps the file's name.
TEST(ReportCommandTest, AMalformedTraceEventIsNamedAndAMissingProcessNameKeepsTheFilesName) {
  Scratch s("report_malformed");
  const fs::path no_args = s.dir / "no_args.json";
  std::ofstream(no_args) << R"({"traceEvents":[{"name":"process_name","ph":"M","pid":1},
{"name":"forward","ph":"X","ts":0,"dur":1000,"pid":1,"tid":1,"args":{"step":0}}]})";
  const StepBreakdown b = step_breakdown_of_trace(no_args.string());
  EXPECT_EQ(b.process, "no_args.json");
  EXPECT_EQ(b.steps, 1);
  EXPECT_NEAR(b.step_ms, 1.0, 1e-9);
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"not_an_object", R"({"traceEvents":[5]})"},
           {"args_not_an_object", R"({"traceEvents":[{"name":"process_name","ph":"M","args":[1]}]})"},
           {"ts_a_string", R"({"traceEvents":[{"name":"forward","ph":"X","ts":"soon","tid":1}]})"},
           {"step_a_string", R"({"traceEvents":[{"name":"forward","ph":"X","ts":0,"args":{"step":"x"}}]})"}}) {
    const fs::path file = s.dir / (name + ".json");
    std::ofstream(file) << text;
    try {
      step_breakdown_of_trace(file.string());
      ADD_FAILURE() << name << ": no error";
    } catch (const DataCorrupt& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
  }
}

// A chart whose values differ by one unit in the last place (1e17 and the next double, 16 above it: the axis' tick
// step, 5, is below their resolution, so adding it never moves a tick) and whose steps lie far apart (2^40: more
// than an int holds) is drawn, in bounded time.
TEST(ReportCommandTest, ChartsOfValuesBeyondTheirResolutionAreDrawn) {
  RunData run;
  run.name = "diverged";
  run.train["epoch_loss"] = {{0, 1e17}, {1, 1e17 + 16}, {2, 1e17}};
  run.train["epoch_accuracy"] = {{0, 0.1}, {int64_t{1} << 40, 0.2}};
  const std::string html = report_html({run}, /*compare=*/false);
  EXPECT_EQ(count(html, "<figcaption>loss</figcaption>"), 1);
  EXPECT_EQ(count(html, "<figcaption>accuracy</figcaption>"), 1);
  EXPECT_EQ(count(html, "<polyline"), 2);
  EXPECT_LT(count(html, "class=\"grid\""), 30) << "a handful of ticks per chart";
}

}  // namespace
}  // namespace strata::cli
