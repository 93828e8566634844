"""Each plan reaches its writer alone: the designer is told so, a plan that points at another plan of the
answer is expanded with that plan's changes where the pointer names one, and refused (never carried out)
where it does not; titles are kept whole wherever a prompt names them."""

from __future__ import annotations

import asyncio
import json

from test_prompts import CPU, Capture, render_all, result, view

from kscience.problems import load_problem
from kscience.scientist.plans import mark_chosen, parse_plans, standalone
from kscience.scientist.roles import Plan, Scientist

LONG_TITLE = ("CUDA load_inline GELU: float4 vector I/O, 4 float4 per thread unrolled, tanh.approx.f32 PTX, "
              "__ldcs/__stcs streaming loads and stores, 256 threads")


def plan(title, rationale, changes, low=1.0, high=2.0, innovation=3):
    return Plan(title, rationale, changes, low, high, innovation)


def test_a_pointer_naming_one_plan_is_expanded_and_any_other_is_refused():
    plans = standalone([
        plan("TF32 tensor-core GEMM", "use TF32", ["tl.dot with input_precision='tf32'", "BLOCK_K 32"]),
        plan("Fused epilogue", "GEMM kernel as in the TF32 plan, then fuse the clamp", ["fuse the clamp"]),
        plan("Smaller tiles", "same as plan 1 but smaller", ["BLOCK_M 64"]),
        plan("Vague", "like the persistent plan, tuned", ["x"], innovation=10),
        plan("Self", "as in this plan; its tiles stay", ["y"]),
    ])
    by = {p.title: p for p in plans}
    assert by["Fused epilogue"].changes == [
        "fuse the clamp",
        "(from the plan \"TF32 tensor-core GEMM\", which \"as in the TF32 plan\" refers to) "
        "tl.dot with input_precision='tf32'",
        "(from the plan \"TF32 tensor-core GEMM\", which \"as in the TF32 plan\" refers to) BLOCK_K 32"]
    assert by["Smaller tiles"].changes[1].startswith("(from the plan \"TF32 tensor-core GEMM\", which \"plan 1\"")
    assert "like the persistent plan" in by["Vague"].refused and not by["Self"].refused
    chosen = [p.title for p in mark_chosen(plans) if p.chosen]
    assert "Vague" not in chosen and len(chosen) == 3  # the most innovative, yet refused: never carried out


def test_titles_are_kept_whole():
    answer = {"plans": [{"title": LONG_TITLE, "rationale": "r", "changes": ["c"], "predicted_min_pct": 1,
                         "predicted_max_pct": 2, "innovation": 3}]}
    (p,) = parse_plans(json.dumps(answer))
    assert p.title == LONG_TITLE and "..." not in p.title


def test_the_designer_is_told_its_plans_reach_their_writers_alone_and_sees_titles_whole():
    prompts, _, _ = render_all(load_problem("softmax"), CPU)
    designer = prompts["designer"]
    assert "it reaches its writer alone: the writer sees that plan, the base and the reference, never the other" in \
        designer.replace("\n   ", " ")
    assert "never point at another plan" in designer.replace("\n   ", " ")
    assert "Already carried out on this base (will not be run again): GROUP_M 8 -> 16" in designer
    problem = load_problem("softmax")
    llm = Capture()
    sci = Scientist(llm, problem, "", strategy="llm")
    base = view("c-1", problem, result(problem, CPU, 10.0))
    asyncio.run(sci.design(base, None, [], done=[LONG_TITLE], in_flight=[LONG_TITLE + " (other line)"]))
    assert LONG_TITLE in llm.prompts["designer"] and LONG_TITLE + " (other line)" in llm.prompts["designer"]
