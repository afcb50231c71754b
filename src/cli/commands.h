// The `strata` command's subcommands. Each add_* registers its subcommands (with complete --help text) on
// the top-level CLI11 app; run_command_line (src/cli/command_line.cc) calls them all, once per command line.
#pragma once

#include <CLI/CLI.hpp>

namespace strata::cli {

// Runs one `strata` command line (argv[0] is the program's name): its exit status. Never exits the process.
int run_command_line(int argc, char** argv);

// `strata train JOB.yaml ...` and `strata evaluate JOB.yaml --checkpoint D` (src/cli/train_command.cc).
void add_train_commands(CLI::App& app);

// `strata export JOB --checkpoint D -o OUT.safetensors`: a saved model from any checkpoint of the job
// (src/cli/export_command.cc).
void add_export_command(CLI::App& app);

// `strata predict MODEL INPUT -o OUT.npy|OUT.csv`: a saved model's outputs for IDX or .npy examples
// (src/cli/predict_command.cc).
void add_predict_command(CLI::App& app);

// `strata data convert ...` and `strata data inspect FILE...` (src/cli/data_command.cc).
void add_data_commands(CLI::App& app);

// `strata launch --workers N [--chief] [--ps M] ... -- COMMAND ARGS...`: a local cluster, one process per
// task with its TF_CONFIG (src/cli/launch_command.cc).
void add_launch_command(CLI::App& app);

// `strata report RUN_DIR... [--compare] [-o FILE]`: an HTML page of training runs (src/cli/report_command.cc).
void add_report_command(CLI::App& app);

// `strata info`: version, features, CPU limits, and the CUDA driver, libraries and GPUs (src/cli/info_command.cc).
void add_info_command(CLI::App& app);

}  // namespace strata::cli
