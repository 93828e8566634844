"""The scientist's roles with synthetic populations and a scripted model: selection strategies,
the designer's parsing and choice rules, the writer's retry, repair, and findings."""

import asyncio
import json
import random

import pytest

from kscience.problems import load_problem
from kscience.scientist.llm.base import LLM, LLMError
from kscience.record.llm_call import LLMCall
from kscience.scientist.roles import (CandidateView, Plan, Scientist, mark_chosen, measured_clause,
                                      parse_plans)
from kscience.scientist.strategy import tournament, tree_search

PROBLEM = load_problem("softmax")
SOURCE = PROBLEM.seed_source


class Scripted(LLM):
    """Answers from a list, in order, and keeps every request; an exception in the list is raised."""

    name = "scripted:test"

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests = []

    async def complete(self, prompt, *, role, system=None, schema=None, context=None):
        self.requests.append({"prompt": prompt, "role": role, "system": system, "schema": schema})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer, LLMCall(role, self.name, prompt, answer, 1, 1, 0.0, 0.0)


def view(id, parent=None, us=None, times=None, status="ok", source=SOURCE, hypothesis="x"):
    return CandidateView(id=id, parent_id=parent, hypothesis=hypothesis, status=status, geomean_us=us,
                         shape_times=times or {}, source=source, message=status)


def run(coro):
    return asyncio.run(coro)


def scientist(llm, strategy="tournament", **kw):
    return Scientist(llm, PROBLEM, "## triton.md\n\nKNOWLEDGE-MARKER", strategy=strategy, **kw)


# --- selection ------------------------------------------------------------------------------------

def population():
    return [
        view("s", None, 12.0, {"a": 12.0, "b": 12.0}, hypothesis="seed"),
        view("c1", "s", 10.0, {"a": 10.0, "b": 10.0}),
        view("c2", "s", 11.0, {"a": 11.0, "b": 11.0}),  # uniformly slower: the same profile as c1
        view("c3", "s", 11.5, {"a": 7.0, "b": 18.9}),  # faster on a, slower on b: a different profile
        view("c4", "c1", None, status="wrong_answer"),
    ]


def test_tournament_takes_the_fastest_base_and_the_most_different_reference():
    chosen = tournament(population())
    assert (chosen.base_id, chosen.reference_id) == ("c1", "c3")
    assert "c3" in chosen.justification and "beats the base on a (+42.9%)" in chosen.justification


def test_without_a_correct_member_the_seed_is_the_base():
    members = [view("s", None, None, status="compile_error"), view("c1", "s", None, status="runtime_error")]
    for pick in (tournament(members), tree_search(members, random.Random(0), 0.2)):
        assert (pick.base_id, pick.reference_id) == ("s", None)
        assert "seed" in pick.justification


def test_tree_with_epsilon_zero_is_greedy_and_takes_a_reference_from_another_branch():
    chosen = tree_search(population(), random.Random(0), epsilon=0.0)
    assert chosen.base_id == "c1" and chosen.reference_id in ("c2", "c3")
    assert chosen.justification.startswith("greedy")


def test_tree_prunes_a_branch_whose_last_attempts_failed_or_regressed():
    members = population() + [view("c5", "c1", 10.5), view("c6", "c1", None, status="compile_error")]
    # c1's last three attempts: c4 failed, c5 slower, c6 failed -> dead branch
    chosen = tree_search(members, random.Random(0), epsilon=0.0)
    assert chosen.base_id == "c5"  # the fastest node that is still live
    assert "pruned as dead branches: c1" in chosen.justification
    # c5 sits under c1; the best kernel on another branch is c2
    assert chosen.reference_id == "c2"


def test_tree_re_expands_the_best_when_every_branch_is_pruned():
    members = [view("s", None, 10.0, hypothesis="seed")] + [view(f"f{i}", "s", None, status="wrong_answer")
                                                             for i in range(3)]
    chosen = tree_search(members, random.Random(0), epsilon=0.5)
    assert chosen.base_id == "s" and "every branch is pruned" in chosen.justification


def test_tree_explores_with_probability_epsilon_deterministically_per_seed():
    members = population()
    explored = tree_search(members, random.Random(3), epsilon=1.0)
    assert explored.base_id != "c1" and explored.justification.startswith("explore")
    assert tree_search(members, random.Random(3), epsilon=1.0) == explored
    picks = {tree_search(members, random.Random(s), epsilon=1.0).base_id for s in range(20)}
    assert picks == {"s", "c2", "c3"}  # every other live node gets explored


def test_scientist_select_dispatches_on_strategy():
    assert run(scientist(Scripted(), "tournament").select(population())).base_id == "c1"
    assert run(scientist(Scripted(), "tree", epsilon=0.0).select(population())).base_id == "c1"
    with pytest.raises(ValueError, match="unknown selection strategy"):
        scientist(Scripted(), "annealing")


def test_llm_selector_gets_the_population_as_json_and_its_schema():
    llm = Scripted(json.dumps({"base_id": "c3", "reference_id": "c1", "justification": "c3 wins shape a"}))
    chosen = run(scientist(llm, "llm").select(population()))
    assert (chosen.base_id, chosen.reference_id, chosen.justification) == ("c3", "c1", "c3 wins shape a")
    request = llm.requests[0]
    assert request["role"] == "selector" and request["schema"]["required"] == ["base_id", "reference_id",
                                                                               "justification"]
    members = json.loads(request["prompt"].split("```json\n")[1].split("```")[0])
    assert {m["id"] for m in members} == {"s", "c1", "c2", "c3", "c4"}
    assert next(m for m in members if m["id"] == "c3")["shape_us"] == {"a": 7.0, "b": 18.9}


def test_llm_selector_rejects_an_unknown_base_and_drops_an_unknown_reference():
    llm = Scripted(json.dumps({"base_id": "c9", "reference_id": "", "justification": "?"}))
    with pytest.raises(LLMError, match="unknown base 'c9'"):
        run(scientist(llm, "llm").select(population()))
    llm = Scripted(json.dumps({"base_id": "c1", "reference_id": "zz", "justification": "best"}))
    chosen = run(scientist(llm, "llm").select(population()))
    assert chosen.reference_id is None and "'zz' ignored" in chosen.justification


# --- designer --------------------------------------------------------------------------------------

def plan(title, low, high, innovation):
    return Plan(title, "why", ["edit"], low, high, innovation)


def test_three_distinct_plans_are_chosen_by_the_three_rules():
    plans = [plan("a", 0, 10, 9), plan("b", -5, 40, 3), plan("c", 5, 8, 2), plan("d", 1, 9, 9), plan("e", 4, 6, 1)]
    mark_chosen(plans)
    chosen = {p.title: p.why_chosen for p in plans if p.chosen}
    # a and d tie on innovation; a's higher maximum breaks the tie
    assert chosen == {"a": "most innovative", "b": "highest max", "c": "highest min"}


def test_one_plan_best_on_every_rule_leaves_the_others_to_the_next_best():
    plans = [plan("star", 10, 50, 10), plan("b", -5, 40, 3), plan("c", 5, 8, 2), plan("d", 6, 7, 1)]
    mark_chosen(plans)
    assert [(p.title, p.why_chosen) for p in plans if p.chosen] == [
        ("star", "most innovative"), ("b", "highest max"), ("d", "highest min")]


def test_experiments_already_run_on_the_base_are_not_chosen_again():
    plans = [plan("star", 10, 50, 10), plan("b", -5, 40, 3), plan("c", 5, 8, 2), plan("d", 6, 7, 1)]
    mark_chosen(plans, done=["STAR", "  d "])  # titles match whatever their case and spacing
    assert [(p.title, p.why_chosen) for p in plans if p.chosen] == [("b", "most innovative"), ("c", "highest max")]
    mark_chosen(plans, done=[p.title for p in plans])
    assert not any(p.chosen for p in plans)


def test_designer_answers_are_parsed_defensively():
    good = {"title": "BLOCK 64 -> 128", "rationale": "r", "changes": ["c"], "predicted_min_pct": 5,
            "predicted_max_pct": -2, "innovation": 14}
    answer = {"avenues": [], "plans": [good, dict(good, title="no numbers", predicted_min_pct="lots"),
                                       {"title": "missing fields"}, dict(good, changes="one change"),
                                       dict(good), "not an object"]}
    plans = parse_plans(json.dumps(answer))
    assert [p.title for p in plans] == ["BLOCK 64 -> 128"]  # the duplicate title is dropped too
    assert (plans[0].predicted_min_pct, plans[0].predicted_max_pct, plans[0].innovation) == (-2, 5, 10)
    answer["plans"][3]["title"] = "single change"
    assert [p.changes for p in parse_plans(json.dumps(answer))] == [["c"], ["one change"]]
    with pytest.raises(LLMError, match="designer answer had no valid plan"):
        parse_plans(json.dumps({"avenues": [], "plans": [{"title": "x"}]}))
    with pytest.raises(LLMError, match="not JSON"):
        parse_plans("plans: none")


def test_design_prompt_holds_task_knowledge_kernels_and_newest_findings_first():
    answer = {"avenues": ["a"], "plans": [{"title": f"p{i}", "rationale": "r", "changes": ["c"],
                                           "predicted_min_pct": i, "predicted_max_pct": 10 + i,
                                           "innovation": i + 1} for i in range(5)]}
    llm = Scripted(json.dumps(answer))
    base, ref = population()[1], population()[3]
    findings = [f"finding {i}: " + "x" * 200 for i in range(60)]  # oldest first, more than the budget
    plans = run(scientist(llm).design(base, ref, findings))
    assert len(plans) == 5 and sum(p.chosen for p in plans) == 3
    prompt = llm.requests[0]["prompt"]
    assert llm.requests[0]["role"] == "designer" and "avenues" in llm.requests[0]["schema"]["required"]
    for part in ("KNOWLEDGE-MARKER", "# Base kernel `c1`", "# Reference kernel `c3`", "a: 7.00 us",
                 '"m": 4096', "def custom_kernel"):
        assert part in prompt
    assert prompt.index("finding 59:") < prompt.index("finding 58:")  # newest first
    assert "finding 0:" not in prompt and "older findings left out" in prompt


# --- writer and repair -----------------------------------------------------------------------------

EDIT_WARPS = "<<<<<<< SEARCH\nNUM_WARPS = 8\n=======\nNUM_WARPS = 4\n>>>>>>> REPLACE"
EDIT_WRONG = "<<<<<<< SEARCH\n    mask = cols <= N\n=======\n    mask = cols < N  # same\n>>>>>>> REPLACE"
EDIT_MASK = "<<<<<<< SEARCH\n    mask = cols < N\n=======\n    mask = cols < N  # same\n>>>>>>> REPLACE"
PLAN = Plan("Fewer warps", "less is more", ["NUM_WARPS 8 -> 4", "comment the mask"], -5, 10, 2)


def test_writer_applies_edits_first_time():
    llm = Scripted(f"Here you go.\n{EDIT_WARPS}\n{EDIT_MASK}")
    draft = run(scientist(llm).write(PLAN, population()[1], None))
    assert (draft.mode, draft.edits_total, draft.edits_applied, draft.error) == ("edits", 2, 2, None)
    assert "NUM_WARPS = 4" in draft.source and "mask = cols < N  # same" in draft.source
    prompt = llm.requests[0]["prompt"]
    assert "# Plan: Fewer warps" in prompt and "- comment the mask" in prompt and "<<<<<<< SEARCH" in prompt


def test_writer_retries_once_with_the_failure_and_counts_every_block():
    llm = Scripted(f"{EDIT_WARPS}\n{EDIT_WRONG}", EDIT_MASK)
    draft = run(scientist(llm).write(PLAN, population()[1], None))
    assert (draft.edits_total, draft.edits_applied, draft.error) == (3, 2, None)
    assert "NUM_WARPS = 4" in draft.source and "# same" in draft.source
    retry = llm.requests[1]["prompt"]
    assert llm.requests[1]["role"] == "writer"
    assert "block 2: the SEARCH text was not found" in retry and "closest source lines" in retry
    assert "1 of 2 blocks applied" in retry
    # the second try works against the source with the first block already in it
    assert "NUM_WARPS = 4" in retry.split("# Current source")[1]


def test_writer_gives_up_after_one_retry_with_a_one_line_error():
    llm = Scripted(EDIT_WRONG, "I am not sure what to do.")
    draft = run(scientist(llm).write(PLAN, population()[1], None))
    assert draft.source is None and draft.edits_total == 1 and draft.edits_applied == 0
    assert draft.error.startswith("after one retry: the answer had neither") and "\n" not in draft.error


def test_writer_accepts_a_full_source_and_retries_one_that_does_not_parse():
    new = SOURCE.replace("NUM_WARPS = 8", "NUM_WARPS = 16")
    llm = Scripted("```python\ndef broken(:\n```", f"The whole file:\n```python\n{new}```")
    draft = run(scientist(llm).write(PLAN, population()[1], None))
    assert (draft.mode, draft.source, draft.edits_total) == ("full", new, 0)
    assert "does not parse: line 1" in llm.requests[1]["prompt"]


def test_writer_refuses_an_unchanged_kernel_and_passes_model_errors_through():
    llm = Scripted(f"```python\n{SOURCE}```", f"```python\n{SOURCE}```")
    draft = run(scientist(llm).write(PLAN, population()[1], None))
    assert draft.source is None and "identical" in draft.error
    with pytest.raises(LLMError, match="provider down"):
        run(scientist(Scripted(LLMError("provider down"))).write(PLAN, population()[1], None))


def test_repair_sends_the_failure_and_applies_the_fix():
    broken = SOURCE.replace("mask = cols < N", "mask = cols <= N")
    llm = Scripted("<<<<<<< SEARCH\n    mask = cols <= N\n=======\n    mask = cols < N\n>>>>>>> REPLACE")
    draft = run(scientist(llm).repair(broken, "wrong_answer", "m=1,n=128: max abs err 0.5", {"m": 1, "n": 128}, 2))
    assert draft.source == SOURCE and (draft.edits_total, draft.edits_applied) == (1, 1)
    prompt = llm.requests[0]["prompt"]
    assert llm.requests[0]["role"] == "repair"
    for part in ("repair attempt 2", "Status: wrong_answer", "max abs err 0.5", '{"m": 1, "n": 128}',
                 "mask = cols <= N"):
        assert part in prompt


# --- findings --------------------------------------------------------------------------------------

def test_measured_clause_is_computed_from_the_numbers():
    p = plan("x", 5, 20, 3)
    assert measured_clause(p, 10.0, "ok", 8.0) == "+25.0% measured (10.00 -> 8.00 us) vs +5..+20% predicted"
    assert measured_clause(p, 10.0, "ok", 12.5) == "-20.0% measured (10.00 -> 12.50 us) vs +5..+20% predicted"
    assert measured_clause(p, 10.0, "wrong_answer", None) == "failed (wrong_answer) vs +5..+20% predicted"
    assert measured_clause(p, None, "ok", 8.0).startswith("correct at 8.00 us, no base time")


def test_finding_joins_the_numbers_and_the_models_lesson():
    llm = Scripted("Warps were not the bottleneck.\nExtra line.")
    base = population()[1]
    text = run(scientist(llm).finding(plan("Fewer warps", 5, 20, 3), base, "ok", 9.0))
    assert text == ("Fewer warps: +11.1% measured (10.00 -> 9.00 us) vs +5..+20% predicted. "
                    "Warps were not the bottleneck. Extra line.")
    prompt = llm.requests[0]["prompt"]
    assert "Measured uplift: +11.1%" in prompt and "Predicted uplift: +5..+20%" in prompt
    assert llm.requests[0]["role"] == "finding"


def test_model_name_comes_from_the_backend():
    assert scientist(Scripted()).model_name == "scripted:test"
