// The `strata` command line as a function: parses it and runs one subcommand. Errors from strata are printed as one
// line naming what went wrong, with exit status 1; usage errors give CLI11's status. Standard output is flushed before
// any error is printed, so that when both streams go to one file the error is the last line. A mistyped subcommand
// ("strata trian") is named, with the nearest known one. The strata binary (main.cc) and the Python package's
// `python -m strata` / `python -m strata.launch` (python/src/cli.cc) both run it.
//
// Thread-safety: one command line at a time per process (the commands set process-wide state: threads, signals).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "strata/error.h"

namespace strata::cli {

namespace {

// Edit distance with adjacent transpositions counted as one edit ("trian" is one from "train").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// Walks the leading words of the command line down the subcommand tree; the first word that should be a
// subcommand and is not raises "unknown command 'trian'; did you mean 'train'?" (or lists the commands
// when none is close). Stops at the first option: what follows may be an option's value.
void check_subcommands(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return;
    const std::vector<CLI::App*> subcommands = current->get_subcommands([](CLI::App*) { return true; });
    if (subcommands.empty() || current->get_require_subcommand_min() == 0) return;
    CLI::App* next = nullptr;
    std::string nearest, names;
    size_t best = std::string::npos;
    for (CLI::App* sub : subcommands) {
      if (sub->check_name(word)) next = sub;
      const size_t d = edit_distance(word, sub->get_name());
      if (d < best) best = d, nearest = sub->get_name();
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (next == nullptr) {
      const std::string unknown = path.empty() ? word : path + " " + word;
      const bool close = best <= std::max<size_t>(1, nearest.size() / 3);
      throw CLI::ExtrasError("unknown command '" + unknown + "'; " +
                                 (close ? "did you mean '" + (path.empty() ? nearest : path + " " + nearest) + "'?"
                                        : "the commands are: " + names),
                             CLI::ExitCodes::ExtrasError);
    }
    path += (path.empty() ? "" : " ") + next->get_name();
    current = next;
  }
}

}  // namespace

int run_command_line(int argc, char** argv) {
  CLI::App app{"strata: train neural networks on one device, many devices, or many machines.", "strata"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata " STRATA_VERSION);
  add_train_commands(app);
  add_export_command(app);
  add_predict_command(app);
  add_data_commands(app);
  add_report_command(app);
  add_launch_command(app);
  add_info_command(app);
  auto fail = [](const char* what) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: %s\n", what);
    return 1;
  };
  try {
    check_subcommands(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::fflush(stdout);
    return app.exit(e);
  } catch (const strata::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory (std::bad_alloc); try a smaller batch_size");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}

}  // namespace strata::cli
