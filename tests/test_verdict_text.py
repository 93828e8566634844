"""Every verdict reaches the model whole: a wrong answer names its first bad element, in the output's own
index even when only sampled bytes were compared, with the value expected and the threshold it crossed; a
baseline's rejection and a member's message are never cut mid-sentence; the finding, the repair and the
selector carry the status, the message and the failing shape with its sizes."""

from __future__ import annotations

import asyncio
import json
import re

import torch
from test_prompts import Capture

from kscience.evaluate.judge import checking
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest, EvalResult
from kscience.problems import load_problem, shape_label
from kscience.scientist.briefing import Baseline, Bench, coverage, render_header, shape_sizes
from kscience.scientist.hardware import describe
from kscience.scientist.roles import CandidateView, Plan, Scientist

WRONG_AT_0_3 = '''
import torch

def custom_kernel(data):
    (x,) = data
    e = (x.float() - x.float().amax(-1, keepdim=True)).exp()  # the problem forbids calling torch.softmax
    y = e / e.sum(-1, keepdim=True)
    y[0, 3] = -1.0  # a probability never is
    return y.to(torch.bfloat16)
'''
# A long rejection as the judge words one: several sentences, each naming evidence and a threshold.
REJECTION = ("the judge's own clock saw about -28071.8 us per call, which no kernel can take. "
             "Its brackets of null calls spread by 5149 us with no other process on the GPU, above the 500 us "
             "it allows. " + "Measured again on a fresh worker, the same evidence held at 1.2x the threshold. " * 6)


def test_a_wrong_answer_names_the_first_bad_element_its_expected_value_and_the_threshold():
    result = evaluate(EvalRequest(problem="softmax", source=WRONG_AT_0_3, shapes="tests"))
    assert result.status == "wrong_answer" and result.failing_shape is not None
    assert "output elements outside rtol=0.01, atol=1e-06; first at (0, 3): got -1, expected " in result.message
    assert re.search(r"\|got - expected\| = 1(\.\d+)? > atol \+ rtol \* \|expected\| = \d", result.message)


def test_a_sampled_mismatch_is_named_at_its_index_in_the_output():
    problem = load_problem("softmax")
    answer = torch.zeros(4, 8)
    ranges = [[16, 8], [64, 16]]  # bytes: elements 4-5, then 16-19, of the contiguous answer
    sampled = checking.gather(answer, ranges).view(torch.float32)
    got = sampled.clone()
    got[3] = 2.0  # the sample's fourth element: element 17, at (2, 1)
    why = checking._sampled_why(got, sampled, ranges, answer, problem, "")
    assert why.startswith("1 of 6 sampled elements of the output outside rtol=0.01, atol=1e-06; first at (2, 1): got 2, "
                          "expected 0: |got - expected| = 2 > atol + rtol * |expected| = 1e-06")
    got[0] = float("nan")  # NaN is check_output's to say
    assert checking._sampled_why(got, sampled, ranges, answer, problem, "1 of 6 output elements are NaN") is None


def test_a_baselines_rejection_reaches_the_header_whole():
    hw = describe("cuda", "NVIDIA H200")
    bench = Bench(hw, hw, "cuda events", baselines=[Baseline("PyTorch eager", f"rejected: `{REJECTION.strip()}`", None)])
    from kscience.scientist.briefing import bench_from_results

    built = bench_from_results(hw, hw, None, [("PyTorch eager", EvalResult("rejected", REJECTION))])
    header = render_header(built)
    assert REJECTION.strip() in header  # whole: it is well within the baseline's budget
    assert render_header(bench).count("Measured again") == 6


def failed_view(problem, result: dict) -> CandidateView:
    return CandidateView("c-2", "c-1", "BLOCK 256", result["status"], None, {}, WRONG_AT_0_3, result["message"],
                         coverage=coverage(EvalResult.from_dict(result), problem), failing_shape=result["failing_shape"])


def test_finding_repair_and_selector_carry_the_whole_verdict():
    problem = load_problem("softmax")
    result = evaluate(EvalRequest(problem="softmax", source=WRONG_AT_0_3, shapes="tests")).to_dict()
    child = failed_view(problem, result)
    base = CandidateView("c-1", None, "seed", "ok", 100.0, {"m=256,n=2048": 100.0}, problem.seed_source,
                         "4 shapes correct; geomean 100.00 us over 1 benchmark shape, timed by cpu interpreter")
    llm = Capture()
    sci = Scientist(llm, problem, "", strategy="llm")
    plan = Plan("BLOCK 256", "r", ["c"], 1.0, 2.0, 3)
    text = asyncio.run(sci.finding(plan, base, child.status, None, child=child))
    asyncio.run(sci.repair(child.source, child.status, child.message, child.failing_shape, 1, coverage=child.coverage))
    other = CandidateView("c-3", "c-1", "BLOCK 64", "ok", 90.0, {"m=256,n=2048": 90.0}, problem.seed_source, "ok")
    asyncio.run(sci.select([base, other, child]))
    where = shape_sizes(problem, child.failing_shape)
    assert where.endswith("bfloat16") and "data[0] " in where
    for role in ("finding", "repair"):
        prompt = llm.prompts[role]
        assert "Status: wrong_answer" in prompt and f"Failing shape: {where}" in prompt, role
        assert "| " + result["message"] in prompt, role  # whole, quoted
        assert f"Shapes covered: {child.coverage}" in prompt, role
    # The finding recorded for later designers carries the verdict in one line, not just "failed".
    assert f"failed (wrong_answer on {shape_label(child.failing_shape)}: `" in text
    assert "first at (0, 3): got -1" in text and "atol + rtol * |expected|" in text
    members = json.loads(llm.prompts["selector"].split("```json\n")[1].split("\n```")[0])
    failed = next(m for m in members if m["id"] == "c-2")
    assert failed["message"] == result["message"] and failed["failed_on"] == shape_label(child.failing_shape)
