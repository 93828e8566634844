"""Resuming runs: after a stop, an LLM failure, and a `kill -9` of the real CLI mid-iteration.

The first tests drive the controller with the scripted scientist of test_loop.py; the last one
runs `kscience run` with the offline scientist and the real evaluator in a subprocess, kills it
once a child candidate is committed, and resumes it.
"""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kscience.run.config import ConfigError, RunConfig
from kscience.run.driver import Run
from kscience.record.snapshot import run_metrics
from kscience.scientist.llm import LLMError
from kscience.record.store import Store, StoreError
from test_loop import FakeExecutor, ScriptedScientist, fake_kernel

TABLES = ("plans", "findings", "llm_calls", "events")


def snapshot(path: Path) -> dict:
    """Every row of every table, read through a plain connection as another process would."""
    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in ("candidates", *TABLES)}
    finally:
        db.close()


def judged(snap: dict) -> int:
    return sum(row[9] != "pending" for row in snap["candidates"])


def assert_kept(before: dict, after: dict) -> None:
    """Rows committed before are still there, unchanged; only pending candidates may have been judged."""
    for table in TABLES:
        assert after[table][:len(before[table])] == before[table], table
    later = {row[0]: row for row in after["candidates"]}
    for row in before["candidates"]:
        if row[9] == "pending":  # column 9 is the status: a pending candidate is judged, nothing else changes
            assert later[row[0]][:9] == row[:9] and later[row[0]][9] != "pending"
        else:
            assert later[row[0]] == row


def test_a_stopped_run_resumes_its_open_experiments_without_redesigning(tmp_path):
    path = tmp_path / "k.db"
    store = Store(path)
    first = Run.create(RunConfig(problem="softmax", iterations=2), store=store, seed_source=fake_kernel(100.0),
                       scientist=ScriptedScientist(), executor=FakeExecutor())
    first.subscribe(lambda e: first.stop() if e.type == "candidate_evaluated" and e.kind == "child" else None)
    assert first.start(background=False).status == "stopped"
    before = snapshot(path)
    assert len(before["plans"]) == 5 and len(before["findings"]) == 0

    scientist = ScriptedScientist()
    resumed = Run.resume(first.id, store=store, scientist=scientist, executor=FakeExecutor())
    assert resumed.start(background=False).status == "finished"
    after = snapshot(path)
    assert_kept(before, after)
    # round 1's three plans were finished, not written again; round 2 was designed once
    assert [c[0] for c in scientist.calls].count("write") == 3 and len(after["plans"]) == 10
    assert len(after["findings"]) == 6
    m = run_metrics(store, first.id)
    assert m.n_candidates == 7 and m.iterations_done == 2


def test_a_failed_run_resumes_and_can_add_iterations(tmp_path):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=1), store=store, seed_source=fake_kernel(100.0),
                     scientist=ScriptedScientist(fail={"write": LLMError("provider down")}),
                     executor=FakeExecutor())
    assert run.start(background=False).status == "failed"
    assert store.run(run.id).error == "provider down"
    resumed = Run.resume(run.id, store=store, iterations=2, scientist=ScriptedScientist(), executor=FakeExecutor())
    assert resumed.target == 3 and store.run(run.id).config["iterations"] == 3
    assert resumed.start(background=False).status == "finished" and store.run(run.id).error is None
    assert run_metrics(store, run.id).iterations_done == 3
    env = store.run(run.id).environment
    assert len(env["previous_sessions"]) == 1 and env["previous_sessions"][0]["torch"] == env["torch"]


def test_a_spent_budget_stops_the_run_and_a_larger_one_resumes_it(tmp_path):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=1, max_tokens=1), store=store,
                     executor=FakeExecutor(delay_s=0))
    assert run.start(background=False).status == "stopped"
    assert run.error.startswith("budget spent:") and run.error.endswith("of 1 tokens after 1 calls")
    (call,) = store.llm_calls(run.id)  # the designer's call went out; the writers' were refused
    assert call["role"] == "designer" and call["input_tokens"] > 0

    resumed = Run.resume(run.id, store=store, max_tokens=10**7, executor=FakeExecutor(delay_s=0))
    assert resumed.start(background=False).status == "finished" and resumed.error is None
    assert store.run(run.id).config["max_tokens"] == 10**7
    assert [c["role"] for c in store.llm_calls(run.id)].count("designer") == 1  # the round was not redesigned


def test_a_run_that_is_still_running_is_not_resumed_twice(tmp_path):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax"), store=store, seed_source=fake_kernel(100.0),
                     scientist=ScriptedScientist(), executor=FakeExecutor())
    # created by this very process, which is alive and has not finished it
    with pytest.raises(StoreError, match="still running"):
        Run.resume(run.id, store=store, scientist=ScriptedScientist(), executor=FakeExecutor())
    Run.resume(run.id, store=store, force=True, scientist=ScriptedScientist(), executor=FakeExecutor())
    store.update_run(run.id, pid=2**22 + 12345)  # a process id that does not exist here
    Run.resume(run.id, store=store, scientist=ScriptedScientist(), executor=FakeExecutor())


def _kscience(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kscience.cli.main", *args], capture_output=True, text=True,
                          timeout=400, **kw)


def _first_evaluated_child(path: Path, proc: subprocess.Popen, timeout: float = 200) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be killed"
        if path.exists():
            db = sqlite3.connect(path)
            try:
                n = db.execute("SELECT count(*) FROM candidates WHERE kind='child' AND status!='pending'").fetchone()[0]
            except sqlite3.OperationalError:  # schema not created yet
                n = 0
            finally:
                db.close()
            if n:
                return
        time.sleep(0.2)
    raise AssertionError("no child candidate was evaluated in time")


@pytest.mark.slow
def test_kill_9_mid_iteration_loses_nothing_and_the_run_resumes(tmp_path):
    path = tmp_path / "k.db"
    proc = subprocess.Popen([sys.executable, "-m", "kscience.cli.main", "run", "softmax", "--llm", "offline",
                             "--iterations", "1", "--db", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _first_evaluated_child(path, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and any evaluation worker it started
        proc.wait()
    before = snapshot(path)
    run_id = sqlite3.connect(path).execute("SELECT id FROM runs").fetchone()[0]
    listed = _kscience("runs", "--db", str(path), "--json")
    assert '"status": "interrupted"' in listed.stdout

    done = _kscience("resume", run_id, "--db", str(path))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    after = snapshot(path)
    assert_kept(before, after)
    assert judged(after) > judged(before) and len(after["events"]) > len(before["events"])
    assert len(after["plans"]) == len(before["plans"]) == 3  # the interrupted round was finished, not redone (the offline designer plans three)
    with Store(path) as store:
        assert store.run(run_id).status == "finished"
        m = run_metrics(store, run_id)
        assert m.best_us <= m.seed_us and len(store.findings(run_id)) == 3
        chosen = [p.id for p in store.plans(run_id) if p.chosen]
        children = [c for c in store.candidates(run_id) if c.kind == "child"]
        assert sorted(c.plan_id for c in children) == sorted(chosen)  # one child per plan, none twice


def test_a_negative_iteration_count_is_refused_and_a_run_stored_with_one_resumes(tmp_path):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=1), store=store, seed_source=fake_kernel(100.0),
                     scientist=ScriptedScientist(), executor=FakeExecutor())
    assert run.start(background=False).status == "finished"
    before = store.run(run.id)
    with pytest.raises(ConfigError, match="--iterations must be at least 0 .on resume: how many to add., not -5"):
        Run.resume(run.id, store=store, iterations=-5, scientist=ScriptedScientist(), executor=FakeExecutor())
    assert store.run(run.id) == before  # refused before anything was written
    # A run stored with a negative total (as an unchecked resume once left it) resumes again.
    store.update_run(run.id, config={**before.config, "iterations": -4})
    resumed = Run.resume(run.id, store=store, iterations=1, scientist=ScriptedScientist(), executor=FakeExecutor())
    assert resumed.target == 2 and resumed.start(background=False).status == "finished"
    assert run_metrics(store, run.id).iterations_done == 2


def test_more_iterations_on_a_spent_evaluation_budget_say_to_raise_it(tmp_path):
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", iterations=3, evaluations=2), store=store,
                     seed_source=fake_kernel(100.0), scientist=ScriptedScientist(), executor=FakeExecutor())
    assert run.start(background=False).status == "finished"
    before = store.run(run.id)
    with pytest.raises(ConfigError, match=r"spent its evaluation budget \(2 of 2\).*--evaluations"):
        Run.resume(run.id, store=store, iterations=1, scientist=ScriptedScientist(), executor=FakeExecutor())
    assert store.run(run.id) == before
    resumed = Run.resume(run.id, store=store, iterations=1, evaluations=5, scientist=ScriptedScientist(),
                         executor=FakeExecutor())
    assert resumed.start(background=False).status == "finished"
    assert run_metrics(store, run.id).n_candidates > 2
