"""Precision measured and labelled (issue 54, item 3): every verdict records the candidate's error against a
float64 evaluation of the reference on the judge's own inputs, beside the reference's own; a kernel far less
precise than the reference is marked "reduced precision" wherever it is shown, and `--precision reference`
makes it a wrong answer. The rule and the text the model is told live in kscience.problems.precision.

The judged cases use a KernelBench fp32 file under the CPU interpreter: a ModelNew that computes in bf16 and
one that computes in fp32 as the reference does.
"""

import contextlib
import dataclasses
import inspect
import io
import json
import math
from pathlib import Path

import pytest
import torch

from kscience.cli.main import main
from kscience.device import detect
from kscience.evaluate.executors import queue_files as Q
from kscience.evaluate.judge.checking import _elements, float64_answer
from kscience.evaluate.judge.compare import gather, sample_ranges
from kscience.evaluate.judge.evaluation import _with_reference_weights, evaluate
from kscience.evaluate.result import (OK, WRONG_ANSWER, EvalRequest, EvalResult, ShapeResult, under_policy)
from kscience.jupyter.panels import header_facts, leaderboard_html
from kscience.problems import ProblemError, load_problem, precision as P
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.record.summary import summary_lines
from kscience.run.config import RunConfig
from kscience.scientist.rules import Rules
from kscience.run.driver import Run
from kscience.record.candidate import Candidate, result_from_stored
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel

LINEAR_RELU = Path(__file__).parent / "data" / "kernelbench_linear_relu.py"
MODEL_HEAD = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n" \
             "    def __init__(self, in_features, out_features):\n        super().__init__()\n" \
             "        self.linear = nn.Linear(in_features, out_features)\n\n    def forward(self, x):\n"
IN_BF16 = MODEL_HEAD + ("        w, b = self.linear.weight.to(torch.bfloat16), self.linear.bias.to(torch.bfloat16)\n"
                        "        return torch.relu(x.to(torch.bfloat16) @ w.T + b).float()\n")
IN_FP32 = MODEL_HEAD + "        return torch.relu(x @ self.linear.weight.T + self.linear.bias)\n"


# --- the rule ------------------------------------------------------------------------------------
def test_the_rule_marks_an_error_far_above_the_references_own_and_above_the_floor():
    assert P.reduced(err=1e-3, ref_err=1e-6, scale=1.0)  # 1000x, above 1e-5 of the output
    assert not P.reduced(err=5e-6, ref_err=1e-6, scale=1.0)  # another order of fp32 arithmetic
    assert not P.reduced(err=5e-6, ref_err=1e-8, scale=1.0)  # 500x, but below the floor: nobody would notice
    assert not P.reduced(err=None, ref_err=1e-6, scale=1.0)  # not measured
    summary = P.summary([{"shape": {"m": 1}, "err_f64": 2e-6, "ref_err_f64": 1e-6, "scale_f64": 1.0},
                         {"shape": {"m": 2}, "err_f64": 3e-3, "ref_err_f64": 1e-6, "scale_f64": 2.0}])
    assert summary["reduced"] and summary["measured"] == 2 and summary["worst"]["shape"] == {"m": 2}
    assert P.label(summary) == ("REDUCED PRECISION (max error 3.00e-03 against float64, 3,000x the reference's "
                                "own 1.00e-06)")
    assert P.summary([{"shape": {}, "f64_note": "no floating-point inputs"}]) == {
        "measured": 0, "reduced": False, "skipped": "no floating-point inputs"}
    assert P.summary([]) == {}


def test_the_model_is_told_the_policy_from_the_text_the_rule_is_stated_in():
    tolerance, reference = P.policy_text("tolerance", 1e-2, 1e-2), P.policy_text("reference", 1e-2, 1e-2)
    assert "within rtol=0.01, atol=0.01" in tolerance and "inside that tolerance passes" in tolerance
    assert "--precision reference" in reference and "will be rejected" in reference
    assert f"more than {P.REDUCED_FACTOR:g}x the reference's own" in reference
    rules = Rules.for_problem(load_problem("softmax"), build_limit_s=300.0, step_limit_s=None,
                              step_limit_from="", interpreted=True, precision="reference")
    assert P.policy_text("reference", load_problem("softmax").rtol, load_problem("softmax").atol) in rules.text()
    with pytest.raises(ProblemError):
        P.policy_text("strict", 0.0, 0.0)


# --- the judge's float64 answer ------------------------------------------------------------------
def test_the_float64_answer_is_the_reference_as_written_computed_in_float64():
    softmax = load_problem("softmax")  # bf16 inputs, `x.float()` inside: promoted to float64 as well
    data = list(softmax.generate_input(3, "cpu", **softmax.cpu_tests[0]))
    exact = float64_answer(softmax, data)
    assert exact.dtype == torch.float64
    by_hand = torch.softmax(data[0].double(), dim=-1)
    assert torch.equal(exact, by_hand)
    kb = _with_reference_weights(load_problem(str(LINEAR_RELU)), 5, detect())  # the model as the judge built it
    x = list(kb.generate_input(3, "cpu", **kb.cpu_tests[0]))
    exact = float64_answer(kb, x)
    model = inspect.getclosurevars(kb.ref_kernel).nonlocals["model"]  # the judge's own, from the secret seed
    assert exact.dtype == torch.float64
    assert torch.allclose(exact, torch.relu(x[0].double() @ model.linear.weight.double().T
                                            + model.linear.bias.double()), rtol=0, atol=1e-12)
    assert model.linear.weight.dtype == torch.float32  # the judge's model itself is left as it was


def test_where_there_is_no_float64_answer_the_verdict_says_why():
    softmax = load_problem("softmax")
    ints = [torch.arange(6).reshape(2, 3)]
    assert float64_answer(softmax, ints) == "no floating-point inputs"

    def fp32_only(data):
        if data[0].dtype != torch.float32:
            raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Double'")
        return data[0]

    refusing = dataclasses.replace(softmax, ref_kernel=fp32_only)
    x = [torch.ones(2, 3)]
    assert float64_answer(refusing, x).startswith("the reference does not run in float64 (RuntimeError: ")
    counting = dataclasses.replace(softmax, ref_kernel=lambda data: data[0].argmax(-1))
    assert float64_answer(counting, x) == "the reference's float64 evaluation returned int64"
    checked = dataclasses.replace(softmax, check=lambda data, out, answer: None)
    assert float64_answer(checked, x) == "the problem's own check judges its outputs"


def test_a_benchmark_shapes_sampled_bytes_are_the_same_elements_of_the_float64_answer():
    answer = torch.randn(3, 1_000_000)  # 12 MB of fp32: sampled in 64 KiB blocks, the first and last among them
    ranges = sample_ranges(answer.numel() * answer.element_size())
    assert len(ranges) > 1 and ranges != [[0, answer.numel() * 4]]
    sampled = gather(answer, ranges).view(torch.float32).double()
    assert torch.equal(_elements(answer.double(), ranges, answer.element_size()), sampled)


# --- verdicts ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def judged():
    """The bf16 and the fp32 ModelNew, each judged once on the KernelBench file (test and benchmark shape)."""
    out = {}
    for name, source in (("bf16", IN_BF16), ("fp32", IN_FP32)):
        request = EvalRequest(problem=str(LINEAR_RELU), source=source)
        out[name] = (request, evaluate(request))
    return out


def test_every_checked_shape_records_both_errors_and_a_bf16_kernel_is_marked(judged):
    for name, (request, result) in judged.items():
        assert result.status == OK, result.message
        for s in result.shapes:
            assert s.err_f64 is not None and s.ref_err_f64 is not None and s.scale_f64 > 0 and s.f64_note == ""
            assert s.ref_err_f64 < 1e-5  # the fp32 reference, against float64
        summary = under_policy(request, dataclasses.replace(result)).precision
        assert summary["policy"] == "tolerance" and summary["measured"] == len(result.shapes)
        assert summary["reduced"] is (name == "bf16"), summary
    bf16 = judged["bf16"][1]
    assert min(s.err_f64 / s.ref_err_f64 for s in bf16.shapes) > 100


def test_precision_reference_turns_a_reduced_precision_kernel_into_a_wrong_answer(judged):
    request, result = judged["bf16"]
    strict = under_policy(dataclasses.replace(request, precision="reference"), dataclasses.replace(result))
    assert strict.status == WRONG_ANSWER and strict.geomean_us is None
    assert strict.message.startswith("reduced precision under --precision reference: max error ")
    assert "the rule: more than 10x the reference's own error" in strict.message
    assert strict.failing_shape == strict.precision["worst"]["shape"]
    request, result = judged["fp32"]
    assert under_policy(dataclasses.replace(request, precision="reference"), dataclasses.replace(result)).ok
    # A baseline is what a user would run: marked, never rejected for it.
    request, result = judged["bf16"]
    baseline = under_policy(dataclasses.replace(request, precision="reference", baseline=True),
                            dataclasses.replace(result))
    assert baseline.ok and baseline.precision["reduced"] and baseline.precision["policy"] == "tolerance"
    with pytest.raises(ProblemError, match="unknown precision policy 'strict'"):
        under_policy(dataclasses.replace(request, precision="strict"), dataclasses.replace(result))


def test_the_new_fields_cross_the_queue_and_old_rows_still_read(judged):
    result = under_policy(*judged["bf16"])
    again = Q._verdict(json.loads(json.dumps(result.to_dict())))  # the queue's own type check of a result file
    assert again.precision == json.loads(json.dumps(result.precision)) and again.shapes[0].err_f64 is not None
    old = {"status": "ok", "message": "1 shape correct", "geomean_us": 5.0,
           "shapes": [{"shape": {}, "ok": True, "phase": "benchmark", "time_us": 5.0}]}
    assert EvalResult.from_dict(old).shapes[0].err_f64 is None and EvalResult.from_dict(old).precision == {}
    parsed, _ = result_from_stored(old)
    assert parsed.precision == {} and P.summary(parsed.shapes) == {}


def test_kscience_eval_prints_the_precision_and_rejects_under_precision_reference(tmp_path, capsys):
    cand = tmp_path / "in_bf16.py"
    cand.write_text(IN_BF16)
    assert main(["eval", str(LINEAR_RELU), str(cand), "--no-baselines"]) == 0
    out = capsys.readouterr().out
    assert "\nprecision: REDUCED PRECISION (max error " in out and "speed-up" not in out
    assert main(["eval", str(LINEAR_RELU), str(cand), "--precision", "reference"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("wrong_answer: reduced precision under --precision reference: max error ")
    assert "speed-up" not in out  # no time: nothing to set the baselines against


# --- a run -----------------------------------------------------------------------------------------
def run_main_show(run) -> str:
    """`kscience show RUN`'s output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["show", run.id, "--db", str(run.store.path)]) == 0
    return out.getvalue()


class ReducedChild(FakeExecutor):
    """Fake verdicts whose benchmark shape records errors against float64: 3e-3 for kernels timed under 75 us
    (they computed in bf16), 1e-6 otherwise, against the reference's own 1e-6."""

    def _judge(self, request):
        result = super()._judge(request)
        for s in result.shapes:
            if s.ok:
                s.err_f64 = 3e-3 if (s.time_us or 100) < 75 else 1e-6
                s.ref_err_f64, s.scale_f64 = 1e-6, 1.0
        return under_policy(request, result)


def test_a_run_sends_its_policy_and_show_the_report_and_the_dashboard_mark_reduced_precision(tmp_path):
    executor = ReducedChild()
    run = Run.create(RunConfig(problem="softmax", iterations=1), store=Store(tmp_path / "k.db"),
                     seed_source=fake_kernel(100.0), scientist=ScriptedScientist(factors=(0.7, 0.9, 1.1)),
                     executor=executor)
    assert run.start(background=False).status == "finished", run.error
    assert {r.precision for r in executor.requests} == {"tolerance"}
    snap = Snapshot.load(run.store, run.id)
    best = snap.best
    assert best.reduced_precision and best.geomean_us == 70.0  # x0.7 of the seed: the bf16 one
    assert not snap.seed.reduced_precision
    shown = run_main_show(run)
    table = shown.splitlines()
    row = next(i for i, line in enumerate(table) if f" {best.id} " in line and " child " in line)
    assert table[row + 1].strip().startswith("REDUCED PRECISION (max error 3.00e-03")  # under its row, as a failure's why
    text = "\n".join(summary_lines(snap.run, snap.metrics()))
    assert "  precision (best)       REDUCED PRECISION (max error 3.00e-03 against float64, 3,000x" in text
    assert "  reduced precision      1 correct kernel: the largest error against a float64 evaluation" in text
    facts = dict(header_facts(snap))
    assert facts["precision (best)"].startswith("REDUCED PRECISION")
    board = leaderboard_html(snap)
    assert board.count(">reduced precision</span>") == 1

    strict = ReducedChild()
    run = Run.create(RunConfig(problem="softmax", iterations=1, precision="reference"),
                     store=Store(tmp_path / "strict.db"), seed_source=fake_kernel(100.0),
                     scientist=ScriptedScientist(factors=(0.7, 0.9, 1.1)), executor=strict)
    assert run.start(background=False).status == "finished", run.error
    kernels = [r for r in strict.requests if not r.baseline]
    assert kernels and all(r.precision == "reference" for r in kernels)
    cands = run.store.candidates(run.id)
    rejected = [c for c in cands if c.status == WRONG_ANSWER and c.kind == "child"]
    assert len(rejected) == 1 and "reduced precision under --precision reference" in rejected[0].message
    assert not Snapshot.load(run.store, run.id).best.reduced_precision
    assert math.isclose(Snapshot.load(run.store, run.id).best.geomean_us, 90.0)


def test_a_candidate_reads_its_precision_from_its_shapes_where_the_verdict_has_no_summary():
    stored = {"status": "ok", "message": "", "geomean_us": 5.0,
              "shapes": [dataclasses.asdict(ShapeResult(shape={}, ok=True, phase="test", err_f64=1e-2,
                                                        ref_err_f64=1e-7, scale_f64=1.0))]}
    row = {"id": "c-1", "run_id": "r-1", "seq": 1, "parent_id": None, "kind": "child", "iteration": 1,
           "plan_id": None, "hypothesis": "", "source": "", "status": "ok", "message": "", "geomean_us": 5.0,
           "result": stored, "repair_attempt": 0, "write_mode": None, "edits_total": 0, "edits_applied": 0,
           "created": 0.0, "evaluated": 1.0}
    assert Candidate.from_row(row).reduced_precision
