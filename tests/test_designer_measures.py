"""What the designer is told comes back, a plan that asks for a measurement the judge then supplies
(issue 44, item 5), and who chooses the plans carried out (item 6): the paper's rule with its ties
stated, or the loop, from the designer's predictions alone."""

import asyncio
import json

from test_profile_run import DATA, h100_run
from test_prompts import H100, result, view

from kscience.evaluate.profile import ncu
from kscience.problems import load_problem
from kscience.scientist.llm.base import LLM
from kscience.scientist.plans import LOOP_RULES, Plan, TIES, mark_chosen, parse_plans
from kscience.scientist.roles import Scientist

ASKS, PLAIN = "Split the row pass", "Retune the warps"


class Designer(LLM):
    """Proposes two plans, one asking for Nsight Compute; each writer answer is the base with the
    plan's title as a comment (so each child is a kernel of its own, as fast as the base)."""

    name = "designer"

    def __init__(self, chooser_sees_innovation: bool = True):
        self.prompts, self.schemas = {}, {}
        self.innovation = chooser_sees_innovation

    async def preflight(self, problem, kernels):
        return None

    async def complete(self, prompt, *, role, system=None, schema=None, context=None):
        self.prompts.setdefault(role, []).append(prompt)
        self.schemas[role] = schema
        if role == "designer":
            plans = [{"title": ASKS, "rationale": "r", "changes": ["two kernels"], "predicted_min_pct": -5,
                      "predicted_max_pct": 10, "measure": ["ncu"]},
                     {"title": PLAIN, "rationale": "r", "changes": ["num_warps 4"], "predicted_min_pct": 0,
                      "predicted_max_pct": 5}]
            if self.innovation:
                for p in plans:
                    p["innovation"] = 3
            return json.dumps({"avenues": ["a"], "plans": plans}), None
        if role == "finding":
            return "A lesson.", None
        return f"```python\n{context.base.source}\n# {context.plan.title}\n```", None


def test_a_plan_asking_for_nsight_compute_gets_it_with_its_finding(tmp_path, monkeypatch):
    recorded = ncu.parse((DATA / "ncu" / "h100_softmax_full_raw.csv").read_text())
    looked_at = []

    def fake_profile(problem, source, shape, **kw):
        looked_at.append(source.splitlines()[-1])
        recorded.shape, recorded.profile_s = dict(shape), 2.0
        return recorded

    monkeypatch.setattr(ncu, "ncu_path", lambda: "/opt/fake/ncu")
    monkeypatch.setattr(ncu, "profile", fake_profile)
    llm = Designer()
    run = h100_run(tmp_path, Scientist(llm, load_problem("softmax"), ""), iterations=1, profile="auto")
    assert run.start(background=False).status == "finished", run.error
    designer = llm.prompts["designer"][0]
    assert "# What comes back" in designer and "time per launched kernel" in designer and '"ncu":' in designer
    assert "measure" in llm.schemas["designer"]["properties"]["plans"]["items"]["properties"]
    # Neither child beats the seed, so only the one whose plan asked is profiled (and the seed, as always).
    assert sorted(looked_at) == sorted([f"# {ASKS}", "STATUS = 'ok'"])
    children = {c.hypothesis: c for c in run.store.candidates(run.id) if c.kind == "child"}
    assert run.store.profile(children[ASKS].id).ncu and not run.store.profile(children[PLAIN].id).ncu
    findings = {p.split("Plan: ")[1].splitlines()[0]: p for p in llm.prompts["finding"]}
    asked = findings[ASKS]
    assert "Asked for: ncu; supplied above: ncu" in asked and "Nsight Compute on m=4096,n=4096" in asked
    assert "Asked for" not in findings[PLAIN]


def plan(title, low, high, innovation, changes=("edit",)):
    return Plan(title, "why", list(changes), low, high, innovation)


def test_the_paper_rule_says_how_ties_are_broken():
    # a and d tie on innovation and maximum: the one listed first wins; b wins two rules, counted once.
    plans = [plan("a", 0, 10, 9), plan("b", 5, 40, 3), plan("c", 5, 8, 2), plan("d", 1, 10, 9)]
    mark_chosen(plans)
    assert [(p.title, p.why_chosen) for p in plans if p.chosen] == [
        ("a", "most innovative"), ("b", "highest max"), ("c", "highest min")]
    assert "then the plan listed first" in TIES and "carried out once" in TIES


def test_the_loop_chooses_by_upside_and_distance_from_plans_tried():
    plans = [plan("BLOCK_N 128 -> 256", 5, 25, 0, ["BLOCK_N = 256"]),
             plan("BLOCK_N 128 -> 512", 4, 24, 0, ["BLOCK_N = 512"]),
             plan("persistent kernel over rows", -10, 30, 0, ["grid = number of SMs", "loop over rows"]),
             plan("num_warps 8 -> 4", 0, 4, 0, ["num_warps = 4"])]
    mark_chosen(plans, done=["BLOCK_N 64 -> 128"], chooser="loop")
    chosen = {p.title: p.why_chosen for p in plans if p.chosen}
    assert chosen["BLOCK_N 128 -> 256"] == LOOP_RULES[0][0]  # highest middle of the range
    assert chosen["persistent kernel over rows"] == LOOP_RULES[1][0]  # shares no words with what was tried
    assert len(chosen) == 3
    # The designer's innovation scores play no part: scoring the near-copy 10 changes nothing.
    again = [plan(p.title, p.predicted_min_pct, p.predicted_max_pct, 10 if "512" in p.title else 1, p.changes)
             for p in plans]
    mark_chosen(again, done=["BLOCK_N 64 -> 128"], chooser="loop")
    assert {p.title: p.why_chosen for p in again if p.chosen} == chosen


def designer_prompt(chooser: str) -> tuple[str, dict]:
    problem = load_problem("softmax")
    llm = Designer(chooser_sees_innovation=chooser == "paper")
    sci = Scientist(llm, problem, "", chooser=chooser)
    plans = asyncio.run(sci.design(view("c-1", problem, result(problem, H100, 100.0)), None, []))
    assert sum(p.chosen for p in plans) == 2
    return llm.prompts["designer"][0], llm.schemas["designer"]


def test_under_the_loop_chooser_the_designer_only_predicts():
    paper, paper_schema = designer_prompt("paper")
    assert "`innovation`" in paper and "the most innovative" in paper and TIES in paper
    assert "innovation" in paper_schema["properties"]["plans"]["items"]["required"]
    loop, loop_schema = designer_prompt("loop")
    assert "`innovation`" not in loop and "no score of yours is used" in loop
    assert "innovation" not in loop_schema["properties"]["plans"]["items"]["properties"]
    # A plan without an innovation score is still a plan.
    (p,) = parse_plans(json.dumps({"plans": [{"title": "t", "rationale": "r", "changes": ["c"],
                                              "predicted_min_pct": 1, "predicted_max_pct": 2, "measure": "stalls"}]}))
    assert p.innovation == 0 and p.measure == ["ncu"]
