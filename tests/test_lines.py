"""Concurrent experiment lines (--lines), the evaluation budget (--evaluations) and busy time per slot.

The scripted scientist and the fake executor of test_loop.py (no Triton), the loopback scripted
model for the model path, and a `kill -9` of a process with four lines in flight.
"""

import asyncio
import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kscience.run.config import ConfigError, RunConfig
from kscience.run.driver import Run
from kscience.record.snapshot import Snapshot, judged_count
from kscience.record.store import BASELINE_KINDS, Store
from scripted_kernel_model import ScriptedKernelModel
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel
from test_resume import assert_kept, snapshot

TESTS = Path(__file__).parent


def make_run(tmp_path, scientist, executor, **config) -> Run:
    return Run.create(RunConfig(problem="softmax", **config), store=Store(tmp_path / "k.db"),
                      seed_source=fake_kernel(100.0), scientist=scientist, executor=executor)


def stages(run, stage: str) -> list[dict]:
    return [e["payload"] for e in run.store.events(run.id)
            if e["type"] == "stage_changed" and e["payload"]["stage"] == stage]


def chosen_titles_per_base(store, run_id) -> list[tuple[str, str]]:
    return [(p.base_id, p.title) for p in store.plans(run_id) if p.chosen]


class SlowWriter(ScriptedScientist):
    """Writes for the plans titled `#D.I` for I in `slow` (D the design's number) take `slow_s`; the
    rest are instant."""

    def __init__(self, slow: set[str], slow_s: float, **kw):
        super().__init__(**kw)
        self.slow, self.slow_s = slow, slow_s
        self.designs = 0

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        self.designs += 1
        return await super().design(base, reference, findings, done, in_flight, **asked)

    async def write(self, plan, base, reference):
        if plan.title.split()[-1] in self.slow:
            await asyncio.sleep(self.slow_s)
        return await super().write(plan, base, reference)


def test_lines_run_concurrently_and_a_finding_of_one_line_reaches_another_lines_designer(tmp_path):
    # Two lines: one design supplies both (iterations 1 and 2); iteration 2's writes are slow, so
    # iteration 1 ends first and its line designs iteration 3 while iteration 2 is still in flight: it
    # must see iteration 1's findings.
    sci = SlowWriter(slow={"#1.3", "#1.4", "#1.5"}, slow_s=1.0, factors=(0.9, 0.8, 1.1, 0.7, 0.6))
    executor = FakeExecutor(capacity=2, delay_s=0.05)
    run = make_run(tmp_path, sci, executor, iterations=3, lines=2)
    assert run.start(background=False).status == "finished", run.error
    store = run.store
    findings = store.findings(run.id)
    by_plan = {p.id: p for p in store.plans(run.id)}
    assert len(findings) == 9 and {p.iteration for p in by_plan.values()} == {1, 2, 3}
    first = [f.text for f in findings if by_plan[f.plan_id].iteration == 1]
    assert sci.design_findings[0] == [] and len(sci.design_findings) == 2  # one answer for both lines
    assert sci.design_findings[1] == first  # iteration 1's lessons, none yet of iteration 2 (in flight)
    assert {s["line"] for s in stages(run, "design")} == {1}  # line 2 took the plans line 1's answer left it
    assert {s["line"] for s in stages(run, "write")} == {1, 2}
    assert executor.max_in_flight == 2
    # no plan was chosen twice on one base, though two lines designed on the seed at once
    pairs = chosen_titles_per_base(store, run.id)
    assert len(pairs) == len(set(pairs)) == 9


class Stubborn(ScriptedScientist):
    """Always proposes the same titles and ignores what is under way: the controller must refuse them."""

    def __init__(self, overlap: int = 2, **kw):
        super().__init__(**kw)
        self.in_flight_seen: list[list[str]] = []
        self._all_designing = asyncio.Event()
        self._designing, self._overlap = 0, overlap

    async def design(self, base, reference, findings, done=(), in_flight=(), **asked):
        self.in_flight_seen.append(list(in_flight))
        self._designing += 1
        if self._designing == self._overlap:
            self._all_designing.set()
        await asyncio.wait_for(self._all_designing.wait(), 5)  # the first `overlap` designs overlap
        plans = await super().design(base, reference, findings, done)
        for i, p in enumerate(plans):
            p.title = f"x{self.factors[i]} same"
        return plans


def test_concurrent_designs_on_one_base_never_choose_a_plan_twice(tmp_path):
    # Six lines: one answer supplies at most four, so two designs run at once on the seed; this designer
    # ignores what it is told and proposes the same titles both times. The second answer's clashes are
    # refused (and said so), and the lines it was to supply design again, told those plans are under way.
    sci = Stubborn(overlap=2, factors=(0.9, 0.8, 1.1, 0.7, 0.6))
    run = make_run(tmp_path, sci, FakeExecutor(capacity=2, delay_s=0.05), iterations=6, lines=6)
    assert run.start(background=False).status == "finished", run.error
    pairs = chosen_titles_per_base(run.store, run.id)
    assert len(pairs) == len(set(pairs))
    assert sci.in_flight_seen[:2] == [[], []]  # both designed before either had stored a plan
    assert [s for s in stages(run, "refused") if s["detail"].startswith("5 proposed plan(s) already taken")]
    assert any(len(seen) == 5 for seen in sci.in_flight_seen[2:])  # a later design saw all five under way
    assert len(run.store.findings(run.id)) == len(pairs)


def test_the_designer_is_told_what_other_lines_have_under_way(tmp_path):
    sci = SlowWriter(slow={"#1.0", "#1.1", "#1.2"}, slow_s=0.5, factors=(1.1, 1.2, 1.3, 1.4, 1.5))
    run = make_run(tmp_path, sci, FakeExecutor(capacity=2, delay_s=0.01), iterations=3, lines=2)

    # The third design starts while iteration 1 is still writing: its titles are under way on the seed.
    original = sci.design

    async def spy(base, reference, findings, done=(), in_flight=(), **asked):
        spy.seen.append((base.id, list(done), list(in_flight)))
        return await original(base, reference, findings, done, in_flight, **asked)

    spy.seen = []
    sci.design = spy
    assert run.start(background=False).status == "finished", run.error
    first_round = [p.title for p in run.store.plans(run.id) if p.iteration == 1 and p.chosen]
    assert any(set(first_round) <= set(in_flight) for _, _, in_flight in spy.seen[1:])


def test_the_evaluation_budget_ends_the_run_at_the_count_and_resume_continues(tmp_path):
    executor = FakeExecutor(capacity=2, delay_s=0.05)
    run = make_run(tmp_path, ScriptedScientist(), executor, evaluations=5, lines=3)
    assert RunConfig(problem="softmax", evaluations=5).iterations == 5  # the budget alone bounds the run
    assert run.start(background=False).status == "finished", run.error
    cands = run.store.candidates(run.id)
    assert judged_count(cands) == 5  # the seed and four children: not one more
    members = {c.id for c in cands if c.kind not in ("eager", "compiled")}
    assert len([r for r in executor.requests if r.candidate_id in members]) == 5
    done = stages(run, "done")
    assert done and "evaluation budget reached: 5" in done[-1]["detail"]
    open_plans = {p.id for p in run.store.plans(run.id) if p.chosen} - {f.plan_id for f in
                                                                              run.store.findings(run.id)}
    assert open_plans  # written or designed work left for a resume, not lost

    resumed = Run.resume(run.id, store=run.store, evaluations=9, scientist=ScriptedScientist(),
                         executor=FakeExecutor(capacity=2, delay_s=0.01))
    assert resumed.start(background=False).status == "finished"
    assert judged_count(run.store.candidates(run.id)) == 9

    # A run bounded by its budget alone: a larger budget on resume lifts its iterations with it.
    more = Run.resume(run.id, store=run.store, evaluations=30, scientist=ScriptedScientist(),
                      executor=FakeExecutor(capacity=2, delay_s=0.01))
    assert more.target == 30 and more.start(background=False).status == "finished"
    assert judged_count(run.store.candidates(run.id)) == 30


def test_iterations_count_designs_with_several_lines(tmp_path):
    sci = ScriptedScientist(factors=(0.9, 0.8, 1.1, 0.7, 0.6))
    run = make_run(tmp_path, sci, FakeExecutor(capacity=3, delay_s=0.02), iterations=5, lines=3)
    assert run.start(background=False).status == "finished", run.error
    assert len({p.iteration for p in run.store.plans(run.id)}) == 5
    assert len(run.store.findings(run.id)) == 15
    with pytest.raises(ConfigError, match="--lines"):
        RunConfig(problem="softmax", lines=0)
    with pytest.raises(ConfigError, match="--evaluations"):
        RunConfig(problem="softmax", evaluations=0)


def test_busy_time_per_slot_is_stored_and_shown(tmp_path):
    run = make_run(tmp_path, ScriptedScientist(), FakeExecutor(capacity=2, delay_s=0.2), iterations=2, lines=2)
    assert run.start(background=False).status == "finished"
    rows = run.store.slot_times(run.id)
    assert [r.slot for r in rows] == [0, 1]
    kernels = [c for c in run.store.candidates(run.id) if c.kind not in BASELINE_KINDS]
    assert sum(r.evaluations for r in rows) == len(kernels)  # every kernel went to a slot (baselines take none)
    snap = Snapshot.load(run.store, run.id)
    busy = snap.busy_fractions
    assert len(busy) == 2 and all(0.0 < b <= 1.0 for b in busy)
    assert snap.metrics().busy_per_slot == busy


def test_a_loopback_model_drives_three_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-loopback")
    executor = FakeExecutor(capacity=2, delay_s=0.2)
    with ScriptedKernelModel(n_plans=3) as model:
        run = Run.create(RunConfig(problem="softmax", llm="openai:scripted", base_url=model.base_url,
                                   iterations=3, lines=3, strategy="tournament"),
                         store=Store(tmp_path / "k.db"), executor=executor)
        assert run.start(background=False).status == "finished", run.error
    store = run.store
    assert len({p.iteration for p in store.plans(run.id)}) == 3
    pairs = chosen_titles_per_base(store, run.id)
    assert len(pairs) == len(set(pairs)) == 9  # three lines designed on the seed at once, nine distinct plans
    assert len(store.findings(run.id)) == 9 and executor.max_in_flight == 2
    assert {s["line"] for s in stages(run, "write")} == {1, 2, 3}


KILLED_RUN = textwrap.dedent("""
    import sys
    sys.path[:0] = [{tests!r}]
    from kscience.run.config import RunConfig
    from kscience.run.driver import Run
    from kscience.record.store import Store
    from test_loop import FakeExecutor, ScriptedScientist, fake_kernel
    run = Run.create(RunConfig(problem="softmax", iterations=4, lines=4), store=Store({db!r}),
                     seed_source=fake_kernel(100.0), scientist=ScriptedScientist(),
                     executor=FakeExecutor(capacity=2, delay_s=1.0))
    run.start(background=False)
""")


def test_kill_9_with_four_lines_in_flight_loses_nothing_and_resume_picks_every_line_up(tmp_path):
    path = tmp_path / "k.db"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN.format(tests=str(TESTS), db=str(path))],
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:  # four iterations designed and at least one child judged: four lines in flight
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            if path.exists():
                try:
                    db = sqlite3.connect(path)
                    its = db.execute("SELECT count(DISTINCT iteration) FROM plans").fetchone()[0]
                    judged = db.execute("SELECT count(*) FROM candidates WHERE kind='child' AND "
                                        "status!='pending'").fetchone()[0]
                    db.close()
                except sqlite3.OperationalError:
                    its = judged = 0
                if its == 4 and judged >= 1:
                    break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = snapshot(path)
    store = Store(path)
    run_id = store.list_runs()[0].id
    assert len(store.findings(run_id)) < 12  # killed in the middle

    sci = ScriptedScientist()
    resumed = Run.resume(run_id, store=store, scientist=sci, executor=FakeExecutor(capacity=2, delay_s=0.01))
    assert resumed.start(background=False).status == "finished", resumed.error
    after = snapshot(path)
    assert_kept(before, after)
    assert not [c for c in sci.calls if c[0] in ("select", "design")]  # every line was resumed, none redesigned
    plans = store.plans(run_id)
    chosen = sorted(p.id for p in plans if p.chosen)
    assert len({p.iteration for p in plans}) == 4 and len(chosen) == 12
    assert sorted(f.plan_id for f in store.findings(run_id)) == chosen  # one finding per plan
    children = [c for c in store.candidates(run_id) if c.kind == "child"]
    assert sorted(c.plan_id for c in children) == chosen  # one child per plan, none written twice


def test_show_and_the_dashboard_say_how_busy_each_slot_was_and_what_each_line_does(tmp_path):
    from kscience.run.events import StageChanged
    from kscience.jupyter import panels
    from kscience.record.summary import summary_lines

    run = make_run(tmp_path, ScriptedScientist(), FakeExecutor(capacity=2, delay_s=0.1), iterations=2, lines=2)
    assert run.start(background=False).status == "finished"
    snap = Snapshot.load(run.store, run.id)
    busy = [line for line in summary_lines(snap.run, snap.metrics()) if "evaluator busy" in line]
    assert len(busy) == 1 and "slot 0" in busy[0] and "slot 1" in busy[0]
    assert dict(panels.header_facts(snap))["evaluator busy"].startswith("slot 0 ")

    stages: dict = {}
    for event in (StageChanged("design", 3, "base c-1", line=1), StageChanged("queued", 4, "c-9", line=2),
                  StageChanged("write", 5, "tile", line=3), StageChanged("line ended", 5, "", line=3)):
        panels.note_stage(stages, event)
    snap.run = dataclasses.replace(snap.run, status="running")
    assert panels.stage_text(snap, stages) == ("line 1: designing base c-1 (iteration 3); "
                                              "line 2: waiting for the evaluator c-9 (iteration 4)")


def test_a_stop_with_three_lines_in_flight_then_resume_loses_nothing(tmp_path):
    path = tmp_path / "k.db"
    first = Run.create(RunConfig(problem="softmax", iterations=4, lines=3), store=Store(path),
                       seed_source=fake_kernel(100.0), scientist=ScriptedScientist(),
                       executor=FakeExecutor(capacity=2, delay_s=0.1))
    first.subscribe(lambda e: first.stop() if e.type == "candidate_evaluated" and e.kind == "child" else None)
    assert first.start(background=False).status == "stopped"
    before = snapshot(path)
    store = first.store
    assert len(store.findings(first.id)) < len([p for p in store.plans(first.id) if p.chosen])

    resumed = Run.resume(first.id, store=store, scientist=ScriptedScientist(),
                         executor=FakeExecutor(capacity=2, delay_s=0.01))
    assert resumed.start(background=False).status == "finished", resumed.error
    assert_kept(before, snapshot(path))
    plans = store.plans(first.id)
    chosen = sorted(p.id for p in plans if p.chosen)
    assert len({p.iteration for p in plans}) == 4
    assert sorted(f.plan_id for f in store.findings(first.id)) == chosen
    assert sorted(c.plan_id for c in store.candidates(first.id) if c.kind == "child") == chosen


def test_offline_at_seconds_answers_like_a_slow_model(tmp_path):
    from kscience.scientist.llm import LLMError
    from kscience.scientist.llm.factory import make_llm

    assert make_llm("offline@0.5").name == "offline@0.5"
    with pytest.raises(LLMError, match="seconds per answer"):
        make_llm("offline@soon")
    assert RunConfig(problem="softmax", llm="offline@30").strategy == "tournament"
    run = Run.create(RunConfig(problem="softmax", llm="offline@0.3", iterations=1), store=Store(tmp_path / "k.db"),
                     executor=FakeExecutor(delay_s=0))
    assert run.start(background=False).status == "finished", run.error
    calls = run.store.llm_calls(run.id)
    assert calls and all(c["latency_s"] >= 0.3 and c["model"] == "offline" for c in calls)


class CopyingFakeExecutor(FakeExecutor):
    """The fake executor rewrites the eager baseline's source in its request: a worker must answer
    for the source it was sent, so it judges a copy."""

    def submit(self, request):
        return super().submit(dataclasses.replace(request))


def test_lines_through_a_queue_directory(tmp_path):
    """Four lines against a queue executor with two requests in flight, answered by a worker whose
    evaluations are the fake executor's: every plan gets its verdict through the directory."""
    import threading

    from kscience.evaluate.executors.queue_dir import QueueExecutor
    from kscience.evaluate.executors.queue_worker import Worker

    worker = Worker(tmp_path / "q", cpu_workers=1, poll_s=0.02, say=lambda line: None)
    worker.executor.shutdown()
    worker.executor = CopyingFakeExecutor(capacity=2, delay_s=0.05)
    stop = threading.Event()

    def serve():  # the worker's own loop, minus its signal handling: take, finish, repeat
        while not stop.is_set():
            while len(worker.in_flight) < 2 and worker._take():
                pass
            for ident in [i for i, (f, _, _) in worker.in_flight.items() if f.done()]:
                worker._finish(ident)
            time.sleep(0.02)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    executor = QueueExecutor(tmp_path / "q", capacity=2, poll_s=0.02)
    try:
        run = make_run(tmp_path, ScriptedScientist(), executor, iterations=4, lines=4)
        assert run.start(background=True).wait(60) == "finished", run.error
    finally:
        executor.shutdown()
        stop.set()
        server.join(5)
    store = run.store
    chosen = sorted(p.id for p in store.plans(run.id) if p.chosen)
    assert len(chosen) == 12 and sorted(f.plan_id for f in store.findings(run.id)) == chosen
    assert worker.executor.max_in_flight == 2 and worker.done == len(worker.executor.requests)
    assert {s["line"] for s in stages(run, "write")} == {1, 2, 3, 4}


def test_ctrl_c_with_lines_in_flight_keeps_every_started_verdict(tmp_path):
    executor = FakeExecutor(capacity=2, delay_s=0.4)
    run = make_run(tmp_path, ScriptedScientist(), executor, iterations=3, lines=3)

    async def interrupt_while_children_are_judged():
        task = asyncio.create_task(run.run_async())
        for _ in range(1000):
            children = [c for c in run.store.candidates(run.id) if c.kind == "child"]
            if executor.in_flight == 2 and len(children) >= 3 or task.done():
                break
            await asyncio.sleep(0.01)
        assert executor.in_flight == 2, "no two evaluations in flight"
        task.cancel()  # what Ctrl-C does to a run in a shell
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt_while_children_are_judged())
    asked = {r.candidate_id for r in executor.requests}
    cands = {c.id: c for c in run.store.candidates(run.id)}
    assert all(cands[i].status != "pending" for i in asked)  # every evaluation started was kept
    assert run.store.run(run.id).status == "stopped"
    resumed = Run.resume(run.id, store=run.store, scientist=ScriptedScientist(), executor=FakeExecutor(capacity=2))
    assert resumed.start(background=False).status == "finished"
    chosen = sorted(p.id for p in run.store.plans(run.id) if p.chosen)
    assert sorted(f.plan_id for f in run.store.findings(run.id)) == chosen


def test_a_schema_3_database_gains_slot_times_and_keeps_its_runs(tmp_path):
    path = tmp_path / "old.db"
    run = make_run(tmp_path, ScriptedScientist(), FakeExecutor(), iterations=1)
    run.start(background=False)
    run.store.close()
    db = sqlite3.connect(path.with_name("k.db"))
    db.execute("DROP TABLE slot_times")
    db.execute("DROP TABLE compositions")  # schema 5
    db.execute("ALTER TABLE candidates DROP COLUMN deviations")  # schema 7
    db.execute("DROP TABLE campaign_sessions")  # schema 6
    db.execute("PRAGMA user_version=3")
    db.commit()
    db.close()
    with Store(path.with_name("k.db")) as store:
        assert store.slot_times(run.id) == [] and len(store.findings(run.id)) == 3
        assert Snapshot.load(store, run.id).busy_fractions == []
    from kscience.record.database import SCHEMA_VERSION
    assert sqlite3.connect(path.with_name("k.db")).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
