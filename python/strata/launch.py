"""`python -m strata.launch [launch options] script.py [script args]` runs a local cluster, one process per task, each
running `python script.py` with its TF_CONFIG: torchrun's form over `strata launch` (docs/cluster.md has every
option: --workers N, --chief, --ps M, --max-restarts, --min-workers, --nnodes ...). A command given after `--` runs
as it is (`python -m strata.launch --workers 2 -- strata train job.yaml`). The launcher's exit status is the job's.
Thread-safety: runs on the main thread."""

import sys

from . import _strata


def command_line(args):
    """`strata launch` arguments for `python -m strata.launch` ARGS: the launch options, `--`, then the command, where
    a first word ending in .py runs under this Python."""
    args = list(args)
    if "--" in args:
        split = args.index("--")
        options, command = args[:split], args[split + 1:]
    else:
        scripts = [i for i, arg in enumerate(args) if arg.endswith(".py") and not arg.startswith("-")]
        if not scripts:
            return ["launch"] + args  # strata launch names what is missing
        options, command = args[:scripts[0]], args[scripts[0]:]
    if command and command[0].endswith(".py"):
        command = [sys.executable] + command
    return ["launch"] + options + ["--"] + command


def main(argv=None):
    return _strata.run_command_line(command_line(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
