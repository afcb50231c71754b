"""`python -m strata ARGS` runs the strata command line (`strata ARGS`: train, evaluate, export, predict, data,
launch, report, info) in this process, so a pip-installed strata needs no separate binary. Thread-safety: runs on the
main thread."""

import sys

from . import _strata


def main(argv=None):
    return _strata.run_command_line(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
