# `python -m strata.launch` (torchrun's form over `strata launch`) and MultiWorkerMirroredStrategy from Python: each
# task gets its TF_CONFIG and the script's arguments; a failing task's status is the launcher's; two workers that fit
# under MultiWorkerMirroredStrategy end with the same weights, and with the one-worker run's loss (each global batch is
# the same examples, sharded by element); so do two PipelineStrategy replicas. `python -m strata` runs the command
# line. Every launcher runs in its own session with a hard time limit and is killed with its tasks on every path.
# Thread-safety: one test process.
import json
import os
import signal
import subprocess
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def run(args, timeout=120):
    """Runs `python ARGS` in a session of its own: (exit status, stdout + stderr); the session is killed on timeout."""
    process = subprocess.Popen([sys.executable] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out = ""
        pytest.fail(f"{args} ran past {timeout} s")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the launcher's tasks are in its session: none left behind
        except ProcessLookupError:
            pass
        process.wait()
    return process.returncode, out


def json_lines(out):
    """{task: the JSON object it printed} from the launcher's "[worker:1] {...}" lines."""
    found = {}
    for line in out.splitlines():
        task, _, rest = line.partition("] ")
        if task.startswith("[") and rest.startswith("{"):
            found[task[1:]] = json.loads(rest)
    return found


def test_each_task_gets_its_tf_config_and_the_scripts_arguments(tmp_path):
    script = tmp_path / "task.py"
    script.write_text("import json, os, sys\n"
                      "print(json.dumps({'task': json.loads(os.environ['TF_CONFIG'])['task'], 'argv': sys.argv[1:]}))\n")
    status, out = run(["-m", "strata.launch", "--workers", "2", str(script), "--epochs", "3"])
    assert status == 0, out
    tasks = json_lines(out)
    assert tasks == {f"worker:{i}": {"task": {"type": "worker", "index": i}, "argv": ["--epochs", "3"]}
                     for i in range(2)}, out


def test_a_failing_task_is_named_and_its_status_is_the_launchers(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import json, os, sys\nsys.exit(3 if json.loads(os.environ['TF_CONFIG'])['task']['index'] else 0)\n")
    status, out = run(["-m", "strata.launch", "--workers", "2", "--", sys.executable, str(script)])
    assert status == 3, out
    assert "worker:1" in out and "exited with status 3" in out, out


def test_two_workers_fit_as_one_under_multi_worker_mirrored_strategy():
    script = os.path.join(SCRIPTS, "multi_worker_fit.py")
    status, out = run(["-m", "strata.launch", "--workers", "2", script, "2"])
    assert status == 0, out
    two = json_lines(out)
    assert sorted(two) == ["worker:0", "worker:1"], out
    assert two["worker:0"]["workers"] == 2 and two["worker:0"]["replicas"] == 2
    assert two["worker:0"]["weights"] == two["worker:1"]["weights"]  # synchronous: the same weights on every worker
    status, out = run(["-m", "strata.launch", "--workers", "1", script, "2"])
    assert status == 0, out
    one = json_lines(out)["worker:0"]
    assert one["workers"] == 1
    assert two["worker:0"]["loss"] == pytest.approx(one["loss"], rel=1e-5)
    assert two["worker:0"]["weights"] == pytest.approx(one["weights"], abs=1e-5)
    assert one["loss"][1] < one["loss"][0]


def test_two_pipeline_replicas_fit_as_one():
    script = os.path.join(SCRIPTS, "multi_worker_fit.py")
    status, out = run(["-m", "strata.launch", "--workers", "2", script, "2", "pipeline"])
    assert status == 0, out
    two = json_lines(out)
    assert sorted(two) == ["worker:0", "worker:1"], out
    assert two["worker:0"]["workers"] == 2 and two["worker:0"]["replicas"] == 2
    assert two["worker:0"]["weights"] == two["worker:1"]["weights"]
    status, out = run(["-m", "strata.launch", "--workers", "1", script, "2", "pipeline"])
    assert status == 0, out
    one = json_lines(out)["worker:0"]
    assert one["workers"] == 1 and one["replicas"] == 1
    assert two["worker:0"]["loss"] == pytest.approx(one["loss"], rel=1e-5)
    assert two["worker:0"]["weights"] == pytest.approx(one["weights"], abs=1e-5)
    assert one["loss"][1] < one["loss"][0]


def test_python_m_strata_is_the_command_line():
    status, out = run(["-m", "strata", "--version"], timeout=60)
    assert status == 0 and out.strip() == "strata 0.1.0", out
    status, out = run(["-m", "strata", "trian"], timeout=60)
    assert status != 0 and "unknown command 'trian'; did you mean 'train'?" in out, out
