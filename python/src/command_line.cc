// The strata command line inside Python: `python -m strata ARGS` is `strata ARGS`, and `python -m strata.launch ARGS`
// is `strata launch ARGS` (python/strata/__main__.py, launch.py), so a pip install needs no separate binary. The
// command runs in this process with the GIL released; it returns its exit status and never exits the process.
// Thread-safety: one command line at a time (the commands set process-wide state: the thread count, signal handlers
// while `launch` runs).
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "cli/commands.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace strata::python {

void define_command_line(nb::module_& m) {
  m.def(
      "run_command_line",
      [](std::vector<std::string> args) {
        args.insert(args.begin(), "strata");
        std::vector<char*> argv;
        for (std::string& arg : args) argv.push_back(arg.data());
        argv.push_back(nullptr);
        nb::gil_scoped_release release;
        return cli::run_command_line(static_cast<int>(args.size()), argv.data());
      },
      "args"_a, "Runs `strata ARGS...` in this process and returns its exit status.");
}

}  // namespace strata::python
