"""Lines that really run in parallel: one designer answer supplies every waiting line, no two lines
send the same prompt, concurrent lines build on different bases, and a line designs its next
iteration while its children are still judged when the model is the slower side.

The scripted scientist and fake executor of test_loop.py, the offline scientist behind a delay, and
the real Scientist's selection rules.
"""

import asyncio
import random

from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.record.store import PENDING, Store
from kscience.scientist.strategy import tournament, tree_search
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel
from test_roles import Scripted, population, run, scientist


def designer_prompts(store, run_id) -> list[str]:
    return [c["prompt"] for c in store.llm_calls(run_id) if c["role"] == "designer"]


def test_lines_starting_together_never_send_the_same_prompt_and_one_answer_supplies_several(tmp_path):
    # Eight lines start at once with the offline scientist answering like a slow model: one answer is
    # asked for plans for four lines, so two designs run at once, and their prompts differ (each names
    # its avenue and what the other is designing).
    run_ = Run.create(RunConfig(problem="matmul", llm="offline@0.3", iterations=8, lines=8),
                      store=Store(tmp_path / "k.db"), executor=FakeExecutor(capacity=2, delay_s=0.01))
    assert run_.start(background=False).status == "finished", run_.error
    prompts = designer_prompts(run_.store, run_.id)
    assert len(prompts) >= 2 and len(set(prompts)) == len(prompts)
    first, second = prompts[:2]
    assert "Turn the 14 most promising" in first and "Favour this avenue" in first
    assert "line 1 is designing on" in second  # the second design knew of the first
    avenues = [p.split("Favour this avenue, where it fits the kernel: ")[1].split(":")[0] for p in prompts[:2]]
    assert avenues[0] != avenues[1]
    plans = run_.store.plans(run_.id)
    pairs = [(p.base_id, p.title) for p in plans if p.chosen]
    assert len(pairs) == len(set(pairs))  # no experiment carried out twice on one base
    iterations = {p.iteration for p in plans}
    assert len(iterations) > len(prompts)  # some lines took plans another line's answer proposed


class SlowDesigner(ScriptedScientist):
    """Designs take `design_s` (a model slower than the evaluator); each design notes how many of the
    run's children were still waiting for a verdict when it was asked, and the findings it was given."""

    def __init__(self, store_of, design_s: float, **kw):
        super().__init__(**kw)
        self.store_of, self.design_s = store_of, design_s
        self.unjudged_at_design: list[int] = []

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        store, run_id = self.store_of()
        if store is not None:
            self.unjudged_at_design.append(sum(c.kind == "child" and c.status == PENDING
                                               for c in store.candidates(run_id)))
        plans = await super().design(base, reference, findings, done, in_flight, **asked)
        await asyncio.sleep(self.design_s)
        return plans


def test_a_line_designs_its_next_iteration_while_its_children_are_still_judged(tmp_path):
    holder = {}
    sci = SlowDesigner(lambda: (holder.get("store"), holder.get("id")), design_s=0.5,
                       factors=(1.1, 1.2, 1.3, 1.4, 1.5))
    executor = FakeExecutor(capacity=1, delay_s=0.3)
    run_ = Run.create(RunConfig(problem="softmax", iterations=3, lines=1), store=Store(tmp_path / "k.db"),
                      seed_source=fake_kernel(100.0), scientist=sci, executor=executor)
    holder.update(store=run_.store, id=run_.id)
    assert run_.start(background=False).status == "finished", run_.error
    # The second design was asked while children of the first were still queued or being judged: the
    # evaluator had work while the model thought.
    assert sci.unjudged_at_design[0] == 0 and sci.unjudged_at_design[1] >= 1
    # Findings that came in after a design was asked still reach the next one.
    first = [f.text for f in run_.store.findings(run_.id) if "#1." in f.text]
    assert len(first) == 3 and set(first) <= set(sci.design_findings[2])
    assert len(run_.store.findings(run_.id)) == 9


def test_a_model_faster_than_the_evaluator_waits_for_the_verdicts_before_designing_again(tmp_path):
    holder = {}
    sci = SlowDesigner(lambda: (holder.get("store"), holder.get("id")), design_s=0.0,
                       factors=(1.1, 1.2, 1.3, 1.4, 1.5))
    run_ = Run.create(RunConfig(problem="softmax", iterations=2, lines=1), store=Store(tmp_path / "k.db"),
                      seed_source=fake_kernel(100.0), scientist=sci, executor=FakeExecutor(capacity=1, delay_s=0.2))
    holder.update(store=run_.store, id=run_.id)
    assert run_.start(background=False).status == "finished", run_.error
    assert sci.unjudged_at_design == [0, 0]


def test_the_selector_is_told_which_bases_other_lines_design_on():
    members = population()  # c1 fastest, then c2, c3, the seed
    assert tournament(members, ["c1"]).base_id == "c2"
    assert "other lines are designing on c1" in tournament(members, ["c1"]).justification
    assert tournament(members, ["c1", "c2", "c3", "s"]).base_id == "c1"  # every one taken: the best
    assert tree_search(members, random.Random(0), 0.0, ["c1"]).base_id == "c2"
    assert run(scientist(Scripted(), "tournament").select(members, taken=["c1"])).base_id == "c2"


class Taking(ScriptedScientist):
    """Selects by the tournament rule with the bases taken, and designs slowly so lines overlap."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.bases: list[tuple[str, list[str]]] = []

    async def select(self, population, findings=(), taken=()):
        chosen = tournament(population, list(taken))
        self.bases.append((chosen.base_id, list(taken)))
        return chosen

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        await asyncio.sleep(0.2)
        return await super().design(base, reference, findings, done, in_flight, **asked)


def test_concurrent_lines_build_on_different_bases_where_the_population_allows(tmp_path):
    store = Store(tmp_path / "k.db")
    first = Run.create(RunConfig(problem="softmax", iterations=1), store=store, seed_source=fake_kernel(100.0),
                       scientist=ScriptedScientist(factors=(0.9, 0.8, 0.7)), executor=FakeExecutor())
    assert first.start(background=False).status == "finished", first.error
    sci = Taking(factors=(1.1, 1.2, 1.3))
    more = Run.resume(first.id, store=store, iterations=9, lines=8, scientist=sci,
                      executor=FakeExecutor(capacity=2, delay_s=0.05))
    assert more.start(background=False).status == "finished", more.error
    # Eight lines waiting: two answers of four lines each, asked at once, on different bases.
    (base_a, taken_a), (base_b, taken_b) = sci.bases[:2]
    assert taken_a == [] and taken_b == [base_a] and base_b != base_a
    bases = {p.iteration: p.base_id for p in store.plans(first.id) if p.iteration > 1}
    assert {base_a, base_b} <= set(bases.values())


def test_the_offline_scientist_proposes_disjoint_plans_to_lines_designing_at_once():
    from kscience.problems import load_problem
    from kscience.scientist.plans import AVENUES
    from test_offline import offline_scientist, seed_view

    problem = load_problem("matmul")
    sci = offline_scientist(problem)
    titles = [{p.title for p in run(sci.design(seed_view(problem), None, [], wanted=14, avenue=avenue,
                                               others=["line 9 is designing on c0"]))}
              for avenue in AVENUES[:2]]
    assert len(titles[0]) >= 6 and len(titles[1]) >= 6 and not titles[0] & titles[1]
    # The first design of a run of several lines starts with no other under way; one that starts while it
    # is under way favours another avenue: the two never overlap.
    first = {p.title for p in run(sci.design(seed_view(problem), None, [], wanted=14, avenue=AVENUES[0]))}
    later = {p.title for p in run(sci.design(seed_view(problem), None, [], wanted=14, avenue=AVENUES[1],
                                             others=["line 1 is designing on c0"]))}
    assert len(first) >= 6 and len(later) >= 6 and not first & later
    alone = {p.title for p in run(sci.design(seed_view(problem), None, [], wanted=14))}
    assert len(alone) == 12  # a lone line names no avenue: every title is its to propose


def test_one_answer_is_split_into_disjoint_groups_of_three():
    from kscience.scientist.plans import Plan, plans_wanted, split_into_groups

    plans = [Plan(f"p{i}", "r", ["c"], float(i), float(i + 5), i % 10 + 1, chosen=i in (7, 8, 9)) for i in range(12)]
    groups = split_into_groups(plans, taken=["p11"], groups=4)
    titles = [[p.title for p in g] for g in groups]
    assert titles[0] == ["p7", "p8", "p9"]  # the designer's own choice first
    flat = [t for g in titles for t in g]
    assert len(flat) == len(set(flat)) == 11 and "p11" not in flat and [len(g) for g in titles] == [3, 3, 3, 2]
    assert split_into_groups(plans, taken=["p8"], groups=1)[0][0].title != "p8"  # a clash: the rules choose
    assert plans_wanted(1) == 5 and plans_wanted(4) == 14


class Avenues(ScriptedScientist):
    """Designs slowly; notes every design that starts while another on the same base favours the same avenue."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.under_way: list[tuple[str, str]] = []
        self.clashes: list[tuple[str, str]] = []
        self.avenues: list[str] = []

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        mine = (base.id, asked.get("avenue", ""))
        self.avenues.append(mine[1])
        if mine in self.under_way:
            self.clashes.append(mine)
        self.under_way.append(mine)
        try:
            await asyncio.sleep(0.2)
            return await super().design(base, reference, findings, done, in_flight, **asked)
        finally:
            self.under_way.remove(mine)


def test_designs_under_way_on_one_base_never_favour_the_same_avenue(tmp_path):
    # Twenty lines start on the seed alone: four answers of four lines each take the four avenues, and the
    # lines left wait for one of them rather than ask a fifth design on an avenue already under way there.
    sci = Avenues(factors=(1.1, 1.2, 1.3, 1.4, 1.5))
    run_ = Run.create(RunConfig(problem="softmax", iterations=20, lines=20), store=Store(tmp_path / "k.db"),
                      seed_source=fake_kernel(100.0), scientist=sci, executor=FakeExecutor(capacity=2, delay_s=0.01))
    assert run_.start(background=False).status == "finished", run_.error
    assert sci.clashes == [] and len(sci.avenues) >= 5 and all(sci.avenues)
    waits = [e["payload"]["detail"] for e in run_.store.events(run_.id)
             if e["type"] == "stage_changed" and e["payload"]["stage"] == "waiting"]
    assert any(" on c-" in w for w in waits)  # a line waited for a design on its base
    refused = [e for e in run_.store.events(run_.id)
               if e["type"] == "stage_changed" and e["payload"]["stage"] == "refused"]
    assert refused == []


def test_a_lone_line_names_no_avenue(tmp_path):
    sci = Avenues(factors=(1.1, 1.2, 1.3, 1.4, 1.5))
    run_ = Run.create(RunConfig(problem="softmax", iterations=2, lines=1), store=Store(tmp_path / "k.db"),
                      seed_source=fake_kernel(100.0), scientist=sci, executor=FakeExecutor(capacity=1, delay_s=0.01))
    assert run_.start(background=False).status == "finished", run_.error
    assert sci.avenues == ["", ""]


def test_avenues_are_handed_out_per_base():
    from kscience.run.sharing import Sharing
    from kscience.scientist.plans import AVENUES

    sharing = Sharing()
    for line in (1, 2, 3):
        sharing.start(line, "c1", sharing.avenue_for(line, "c1"), 4)
    assert len({d.avenue for d in sharing.designs}) == 3
    fourth = sharing.avenue_for(1, "c1")  # line 1's own avenue is under way there: the one left
    assert fourth == (set(AVENUES) - {d.avenue for d in sharing.designs}).pop()
    sharing.start(4, "c1", fourth, 4)
    assert sharing.avenue_for(5, "c1") is None and sharing.designing_on("c1").line == 1
    assert sharing.avenue_for(5, "c2") == AVENUES[0]  # another base: every avenue is free there
