"""A campaign's problems at once (issue 54, item 1): one executor and one set of slots shared by every run,
handed out by a rule (fewest slots held, then longest evaluation, then first asked), a stopped campaign
resumed where it stood, and what the sessions did with the slots in the store and the report.

The slots are tested on a clock that moves only when the test says so; the campaigns with the offline
scientist behind a short delay and the fake executor of test_loop.py, so the scheduling is what is tested."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kscience.campaigns.campaign import Campaign, CampaignConfig
from kscience.campaigns.report import campaign_report, report_lines
from kscience.campaigns.scheduler import lines_per_run, problems_at_once
from kscience.record.store import Store
from kscience.run.in_flight import InFlight
from kscience.run.slots import Slots
from test_loop import FakeExecutor

PROBLEMS = "softmax,rmsnorm,swiglu,matmul"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def slots(capacity: int, clock: Clock | None = None) -> Slots:
    return Slots(capacity=capacity, in_flight=InFlight(None), clock=clock or Clock())


# --------------------------------------------------------------------------- the hand-out rule
def test_a_freed_slot_goes_to_the_run_holding_fewest_then_the_longest_evaluation_then_the_first_to_ask():
    async def scenario():
        pool = slots(2)
        assert pool.take_now("a") == [0] and pool.take_now("a") == [1]  # run a holds both slots
        asked = {"short a": pool.wait("a", expected_s=1.0), "long a": pool.wait("a", expected_s=50.0),
                 "long b": pool.wait("b", expected_s=20.0), "unknown c": pool.wait("c", expected_s=None),
                 "second b": pool.wait("b", expected_s=20.0)}
        order = []
        for slot in (0, 1, 0, 1, 0):  # each time, the slot the evaluation on it gives back
            pool.give(slot)
            order += [name for name, future in asked.items() if future.done() and name not in order]
        return order

    # 1. a holds one, b and c none: c's problem is not timed yet, so it counts as longest; 2. a's slot back, a and
    # b hold none: a's 50 s problem before b's 20 s; 3. c's back, b holds none and a one: b's first of two;
    # 4. a's back, a holds none and b one: a's short one before b's second; 5. b's second.
    assert asyncio.run(scenario()) == ["unknown c", "long a", "long b", "short a", "second b"]


def test_idle_slot_work_never_holds_back_an_evaluation_and_a_pair_waits_for_both_slots():
    async def scenario():
        pool = slots(2)
        held = pool.take_now("a", 2)
        assert held == [0, 1] and pool.take_now("b") is None
        profile = pool.wait_idle("a")  # a profile job: only when no evaluation waits
        pair = pool.wait("b", expected_s=100.0, count=2)
        single = pool.wait("c", expected_s=5.0)
        pool.give(0)
        # one slot is free, but the pair is first (b and c hold nothing; b's problem is the longer) and is served
        # whole, and nothing behind it may pass it
        assert not pair.done() and not single.done() and not profile.done() and pool.free() == 1
        pool.give(1)
        assert pair.result() == [0, 1] and not single.done()
        pool.give(0)
        assert single.result() == [0] and not profile.done()
        pool.give(1)
        assert profile.result() == [1]

    asyncio.run(scenario())


def test_the_slots_count_what_they_held_and_any_slot_left_free_while_an_evaluation_waited():
    async def scenario():
        clock = Clock()
        pool = slots(2, clock)
        pool.take_now("a", 2)
        clock.now = 3.0
        waiting = pool.wait("b", expected_s=1.0, count=2)  # needs both: one freed slot stands idle
        pool.give(0)
        clock.now = 5.0
        pool.give(1)  # 2 s with one slot free while the pair waited
        assert waiting.result() == [0, 1]
        clock.now = 9.0
        pool.give(0)
        pool.give(1)
        return pool

    pool = asyncio.run(scenario())
    assert pool.busy_s == pytest.approx(3.0 + 5.0 + 2 * 4.0) and pool.idle_waiting_s == pytest.approx(2.0)
    assert pool.holds == 4


def test_how_many_problems_at_once_and_how_many_lines_each():
    assert problems_at_once(None, 100, 1) == 8 and problems_at_once(None, 5, 4) == 5
    assert problems_at_once(3, 10, 4) == 3 and problems_at_once(20, 10, 4) == 10
    assert lines_per_run(None, 1, 8) == 1 and lines_per_run(None, 8, 3) == 3 and lines_per_run(2, 8, 3) == 2
    with pytest.raises(ValueError, match="--problems-at-once must be at least 1"):
        CampaignConfig(problems_at_once=0)


# --------------------------------------------------------------------------- campaigns over one executor
def campaign(tmp_path, **settings) -> Campaign:
    config = CampaignConfig(llm="offline@0.2", iterations=1, compiled_baseline=False, profile="none", **settings)
    return Campaign.create(PROBLEMS, config, store=Store(tmp_path / "k.db"))


def watch_running(camp: Campaign) -> dict:
    """The most problems whose runs were going at once."""
    seen = {"now": set(), "most": 0}

    def changed(_, row, event):
        if row is None or event is not None:
            return
        (seen["now"].add if row.status == "running" else seen["now"].discard)(row.name)
        seen["most"] = max(seen["most"], len(seen["now"]))

    camp.subscribe(changed)
    return seen


def test_the_problems_run_at_once_over_one_slot_that_never_idles_while_an_evaluation_waits(tmp_path):
    camp, executor = campaign(tmp_path), FakeExecutor(capacity=1, delay_s=0.1)
    seen = watch_running(camp)
    camp.start(executor=executor)
    store = camp.store
    assert store.campaign(camp.id).status == "finished"
    rows = store.campaign_problems(camp.id)
    assert [r.status for r in rows] == ["finished"] * 4
    assert seen["most"] == 4  # every problem at once (8 per slot by default, and there are 4)
    assert executor.max_in_flight == 1  # the four runs kept to the one slot between them
    assert all(store.run(r.run_id).config["lines"] == 1 for r in rows)  # the slot's one line, shared out
    (session,) = store.campaign_sessions(camp.id)
    assert session.slots == 1 and session.problems_at_once == 4
    assert session.idle_waiting_s == 0.0  # the slot was never free while an evaluation waited for it
    assert 0 < session.busy_s <= session.wall_s

    report = campaign_report(store, camp.id)
    usage = report.usage
    assert usage.busy == pytest.approx(session.busy_s / session.wall_s, abs=1e-3)
    assert usage.problems_at_once == 4 and usage.gpu_hours == 0.0  # the fake device is no GPU
    for row in report.problems:
        assert row.wall_s > 0 and 0 < row.busy <= 1 and row.slot_busy_s > 0, row
        assert row.tokens == 0 and row.cost_usd == 0.0  # the offline scientist's answers cost nothing
    # The problems shared one slot: what each held adds up to no more than the slot's time.
    assert sum(r.slot_busy_s for r in report.problems) <= session.wall_s + 1e-6
    text = "\n".join(report_lines(report))
    assert "GPU-h" in text and "4 problem(s) at once on 1 slot(s)" in text


def test_a_stopped_campaign_resumes_where_it_stood(tmp_path):
    camp = campaign(tmp_path, problems_at_once=2)
    executor = FakeExecutor(capacity=1, delay_s=0.1)
    stopped = threading.Event()

    def stop_after_the_first(c, row, event):
        if row is not None and event is None and row.status == "finished" and not stopped.is_set():
            stopped.set()
            c.stop()

    camp.subscribe(stop_after_the_first)
    camp.start(executor=executor)
    store = camp.store
    assert store.campaign(camp.id).status == "stopped"
    before = {r.position: r for r in store.campaign_problems(camp.id)}
    finished = {p: r.run_id for p, r in before.items() if r.status == "finished"}
    begun = {p: r.run_id for p, r in before.items() if r.run_id and r.status != "finished"}
    assert finished and begun and len(finished) + len(begun) <= 3  # two at once: at most one more began
    kept = {run_id: store.candidates(run_id) for run_id in finished.values()}

    again = Campaign.resume(camp.id, store=store)
    again.start(executor=executor)
    after = {r.position: r for r in store.campaign_problems(camp.id)}
    assert store.campaign(camp.id).status == "finished"
    assert [r.status for r in after.values()] == ["finished"] * 4
    assert all(after[p].run_id == run_id for p, run_id in {**finished, **begun}.items())  # none begun again
    assert all(store.candidates(run_id) == cands for run_id, cands in kept.items())  # finished ones not redone
    assert len(store.campaign_runs(camp.id)) == 4 and len(store.campaign_sessions(camp.id)) == 2
    assert executor.max_in_flight == 1


def test_problems_at_once_is_a_campaign_flag_kept_for_its_resume(tmp_path):
    from kscience.cli.main import build_parser
    from kscience.campaigns.campaign import campaign_from_args

    db = str(tmp_path / "k.db")
    args = build_parser().parse_args(["campaign", "softmax", "rmsnorm", "--problems-at-once", "3", "--llm", "offline",
                                      "--db", db])
    with Store(db) as store:
        camp = campaign_from_args(args, store)
        assert store.campaign(camp.id).config["problems_at_once"] == 3
        store.update_campaign(camp.id, status="stopped")
        resumed = campaign_from_args(build_parser().parse_args(["campaign", "--resume", camp.id, "--problems-at-once",
                                                                "1", "--db", db]), store)
        assert resumed.config.problems_at_once == 1 and store.campaign(camp.id).config["problems_at_once"] == 1
