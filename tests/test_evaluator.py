"""The evaluator's foundation: seeds pass, each failure has its status, results round-trip, the CLI.

Without a GPU every candidate runs under the Triton interpreter on the problems' small CPU
shapes. The Triton seeds take seconds per call there, so most are checked on their test
shapes only; softmax, the cheapest, also goes through the timed loop.
"""

from __future__ import annotations

import json

import pytest

import kscience.evaluate.judge.session as session_module
from kscience.cli.main import main as cli_main
from kscience.evaluate.judge import evaluation
from kscience.evaluate.judge.evaluation import evaluate, shape_order
from kscience.evaluate.result import (COMPILE_ERROR, CRASHED, OK, REJECTED, RUNTIME_ERROR, STATUSES, TIMEOUT,
                                      WRONG_ANSWER, EvalRequest, EvalResult, ShapeResult)
from kscience.problems import builtin_names, geomean, load_problem

PLAIN_SOFTMAX = """
import torch

def custom_kernel(data):
    (x,) = data
    x = x.float()
    e = (x - x.amax(-1, keepdim=True)).exp()  # from its parts: softmax forbids calling torch.softmax
    return (e / e.sum(-1, keepdim=True)).to(torch.bfloat16)
"""
TIMED_SEEDS = {"softmax"}  # seeds cheap enough under the interpreter to time as well


def softmax(source: str, shapes: str = "tests") -> EvalResult:
    return evaluate(EvalRequest(problem="softmax", source=source, shapes=shapes))


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_seed_is_ok(name):
    shapes = "all" if name in TIMED_SEEDS else "tests"
    problem = load_problem(name)
    result = evaluate(EvalRequest(problem=name, source=problem.seed_source, shapes=shapes), problem=problem)
    assert result.status == OK, f"{result.message}\n{result.stderr_tail[-2000:]}"
    assert len(result.shapes) == len(problem.shapes(shapes, interpreted=True)) and all(s.ok for s in result.shapes)
    assert result.device["interpreted"] and result.timing_label.startswith("cpu interpreter")
    if shapes == "all":
        timed = [s for s in result.shapes if s.phase == "benchmark"]
        assert timed and all(s.time_us > 0 and s.n >= 3 and s.std_us is not None for s in timed)
        assert result.geomean_us == pytest.approx(geomean([s.time_us for s in timed]))


def test_a_plain_pytorch_candidate_is_ok_and_timed():
    result = softmax(PLAIN_SOFTMAX, shapes="all")
    assert result.status == OK, result.message
    bench = result.shapes[-1]
    assert bench.phase == "benchmark" and bench.time_us > 0 and bench.mean_us > 0 and bench.n >= 3
    assert "geomean" in result.message and result.wall_s > 0
    # Where the seconds went, the wait for the worker apart from the candidate's import, and the
    # judge's own work (building inputs, computing answers, reading timed outputs) apart from the worker's.
    assert set(result.phases_s) >= {"start", "import", "check", "time", "recheck", "close", "inputs", "reference",
                                    "reads"}
    assert sum(result.phases_s.values()) <= result.wall_s
    # The worker's own account of the import, step by step (shown, never weighed).
    steps = result.device["setup_s"]
    assert set(steps) == {"device", "problem", "gpu", "integrity", "candidate"}
    assert all(v >= 0.0 for v in steps.values()) and sum(steps.values()) <= result.phases_s["import"] + 1.0


@pytest.mark.parametrize("status, source, words", [
    (COMPILE_ERROR, "import torch\ndef custom_kernel(data:\n    pass\n", "SyntaxError"),
    (COMPILE_ERROR, "import no_such_module_anywhere\n", "import failed"),
    (RUNTIME_ERROR, "def custom_kernel(data):\n    return 1 / 0\n", "ZeroDivisionError"),
    (WRONG_ANSWER, PLAIN_SOFTMAX.replace("-1,", "0,"), "elements outside"),
    (CRASHED, "import os\ndef custom_kernel(data):\n    os.kill(os.getpid(), 9)\n", "SIGKILL"),
    (REJECTED, "import time\ntime.perf_counter = time.process_time\n" + PLAIN_SOFTMAX, "time.perf_counter"),
])
def test_each_failure_has_its_status(status, source, words):
    result = softmax(source)
    assert result.status == status, result.message
    assert words in result.message
    assert result.geomean_us is None and "\n" not in result.message


def test_a_timeout_has_its_status(monkeypatch):
    monkeypatch.setitem(session_module.LIMITS, "check", (5.0, 5.0))
    result = softmax("import time\ndef custom_kernel(data):\n    time.sleep(60)\n")
    assert result.status == TIMEOUT, result.message
    assert "timed out: the judge's 5 s limit for checking correctness ran out" == result.message
    # the first shape of this evaluation's own order (evaluation.shape_order)
    assert result.failing_shape == shape_order(load_problem("softmax").cpu_tests, result.shape_order_seed, "tests")[0]


def test_the_overall_timeout_caps_every_phase():
    result = evaluate(EvalRequest(problem="softmax", source="while True:\n    pass\n", timeout_s=8))
    assert result.status == TIMEOUT, result.message
    assert "the evaluation's 8 s limit ran out while importing the candidate" in result.message
    assert result.wall_s < 30


def test_results_round_trip_through_json():
    result = EvalResult(status=OK, message="2 shapes correct", geomean_us=12.5,
                        shapes=[ShapeResult(shape={"m": 1, "n": 128}, ok=True, phase="test", max_abs_err=0.0),
                                ShapeResult(shape={"m": 256, "n": 2048}, ok=True, phase="benchmark", time_us=12.5,
                                            mean_us=13.0, std_us=0.5, n=40, floor_us=1.0)],
                        device={"kind": "cpu", "sandbox": "landlock v7"}, timing_label="cuda events",
                        stdout_tail="hello", stderr_tail="", wall_s=3.5, failing_shape=None)
    again = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and again.ok
    assert set(STATUSES) == {OK, COMPILE_ERROR, RUNTIME_ERROR, WRONG_ANSWER, TIMEOUT, CRASHED, REJECTED}


def test_a_real_result_round_trips_through_json():
    result = softmax("def custom_kernel(data):\n    return data\n")
    assert result.status == RUNTIME_ERROR
    assert EvalResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


# --- the command line ---------------------------------------------------------------------

def test_cli_eval_json_ok_exits_zero(tmp_path, capsys):
    candidate = tmp_path / "candidate.py"
    candidate.write_text(PLAIN_SOFTMAX)
    assert cli_main(["eval", "softmax", str(candidate), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"status", "message", "geomean_us", "shapes", "device", "stdout_tail"} <= set(out)
    assert out["status"] == OK and out["geomean_us"] > 0
    for shape in out["shapes"]:
        assert {"shape", "ok", "time_us", "std_us", "n"} <= set(shape)
    assert out["shapes"][-1]["time_us"] > 0 and out["shapes"][-1]["n"] >= 3


def test_cli_eval_not_ok_exits_one(tmp_path, capsys):
    candidate = tmp_path / "candidate.py"
    candidate.write_text("def custom_kernel(data):\n    raise ValueError('nope')\n")
    assert cli_main(["eval", "softmax", str(candidate), "--shapes", "tests"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("runtime_error: ValueError: nope")
    assert "\nconfinement: landlock, " in out and "MISSING" not in out  # every verdict names its isolation


def test_cli_eval_refuses_weak_confinement_unless_unconfined(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluation, "weak_points", lambda: ["Landlock (test)"])
    candidate = tmp_path / "candidate.py"
    candidate.write_text(PLAIN_SOFTMAX)
    assert cli_main(["eval", "softmax", str(candidate), "--shapes", "tests"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("rejected: refusing to run unconfined: no Landlock (test)")
    assert "confinement: MISSING Landlock (test)" in out
    assert cli_main(["eval", "softmax", str(candidate), "--shapes", "tests", "--unconfined"]) == 0
    assert "MISSING Landlock (test) (allowed for this run)" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [(["eval", "no_such_problem", "{candidate}"], "no problem"),
                                         (["eval", "softmax", "{missing}"], "cannot read candidate"),
                                         (["eval", "softmax", "{candidate}", "--shapes", "some"], "")])
def test_cli_usage_and_problem_errors_exit_two(tmp_path, capsys, args, words):
    candidate = tmp_path / "candidate.py"
    candidate.write_text(PLAIN_SOFTMAX)
    argv = [a.format(candidate=candidate, missing=tmp_path / "missing.py") for a in args]
    try:
        code = cli_main(argv)
    except SystemExit as exc:  # argparse rejects a bad choice itself, with its own exit code 2
        code = exc.code
    assert code == 2
    assert words in capsys.readouterr().err
