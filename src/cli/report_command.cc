// `strata report RUN_DIR... [--compare] [-o FILE]` (report.h): reads the runs, writes the page.
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "cli/report.h"
#include "strata/error.h"

namespace strata::cli {

namespace {

struct ReportArgs {
  std::vector<std::string> runs;
  bool compare = false;
  std::string output = "report.html";
};

void run_report(const ReportArgs& args) {
  std::vector<RunData> runs;
  for (const std::string& dir : args.runs) runs.push_back(load_run(dir));
  const std::string html = report_html(runs, args.compare);
  std::ofstream out(args.output, std::ios::binary | std::ios::trunc);
  STRATA_CHECK(out, IoError, "strata report: cannot write " << args.output);
  out << html;
  out.close();
  STRATA_CHECK(out, IoError, "strata report: writing " << args.output << " failed");
  int traces = 0;
  for (const RunData& r : runs) traces += static_cast<int>(r.breakdown.size());
  std::printf("report: %s (%zu run%s, %d trace%s)\n", args.output.c_str(), runs.size(), runs.size() == 1 ? "" : "s",
              traces, traces == 1 ? "" : "s");
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* report = app.add_subcommand(
      "report",
      "Write one self-contained HTML page (inline SVG, no script, nothing fetched) of training runs: loss and metric "
      "curves per epoch, throughput, input wait and communication time from each RUN_DIR's TensorBoard files "
      "(`strata train --log-dir RUN_DIR`), and the time of a step broken down by what it did from any trace in it "
      "(`--trace RUN_DIR/trace.json`).");
  report->add_option("runs", args->runs, "run folders: what `strata train --log-dir` wrote")
      ->required()
      ->check(CLI::ExistingDirectory);
  report->add_flag("--compare", args->compare,
                   "overlay the runs in one chart per quantity (e.g. mirrored against one_device) instead of a column "
                   "of charts per run");
  report->add_option("-o,--output", args->output, "the page to write (default report.html)");
  report->callback([args] { run_report(*args); });
}

}  // namespace strata::cli
