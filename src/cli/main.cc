// The `strata` command: the command line (cli/command_line.cc) with each line tagged by its task under mpirun and
// srun, where every rank writes to one place (cli/tagged_output.h).
//
// Thread-safety: runs on the main thread.
#include "cli/commands.h"
#include "cli/tagged_output.h"

int main(int argc, char** argv) {
  strata::cli::start_tagged_output();  // before any thread starts: it forks
  const int code = strata::cli::run_command_line(argc, argv);
  strata::cli::finish_tagged_output();
  return code;
}
