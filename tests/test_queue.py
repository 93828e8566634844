"""The queue executor and `kscience worker`: requests and verdicts as files, a worker in another
process, a worker killed mid-evaluation, a run stopped while waiting and resumed, and results
that are malformed, tampered with or answer nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kscience.evaluate.executors import queue_files as Q
from kscience.evaluate.executors.queue_dir import QueueExecutor
from kscience.evaluate.result import OK, EvalRequest, EvalResult
from kscience.run.events import EvaluationWaiting
from kscience.problems import load_problem
from kscience.run.driver import Run, RunConfig
from kscience.record.store import Store

SEED = load_problem("softmax").seed_source
SLOW_FIRST_CALL = SEED + """
import time as _time

_calls = []
_fast_kernel = custom_kernel


def custom_kernel(data):
    if not _calls:
        _time.sleep(4)
    _calls.append(1)
    return _fast_kernel(data)
"""
ROOT = Path(__file__).resolve().parents[1]


def request(source: str = SEED, candidate: str = "c-test") -> EvalRequest:
    return EvalRequest(problem="softmax", source=source, shapes="tests", candidate_id=candidate)


def start_worker(directory: Path, *args: str) -> subprocess.Popen:
    """`kscience worker DIR` in its own session, so the test can end it with everything it started."""
    return subprocess.Popen([sys.executable, "-m", "kscience.cli.main", "worker", str(directory), "--poll", "0.1", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def stop_worker(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate(timeout=30)[0]


def wait_for(condition, timeout_s: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(6):
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid == ancestor:
            return True
    return False


def evaluating_under(worker_pid: int) -> bool:
    """Whether an evaluation worker started (through the slot's judge) by this `kscience worker` runs."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"kscience.evaluate.worker" in cmd and _descends_from(int(entry), worker_pid):
                return True
    return False


def test_queue_end_to_end_with_a_worker_in_another_process(tmp_path):
    with QueueExecutor(tmp_path, poll_s=0.1) as ex:
        future = ex.submit(request())
        (req,) = Q.queue_files(tmp_path / "requests")
        sent = json.loads(req.read_text())  # plain JSON, the candidate's source inside
        assert sent["request"]["source"] == SEED and sent["kind"] == "kscience-request"
        assert ex.wait_state(future).startswith("queued for a kscience worker")
        worker = start_worker(tmp_path, "--once")
        worker.wait(timeout=300)
        out = stop_worker(worker)
        result = future.result(timeout=30)
    assert result.status == OK, (result.message, out)
    assert result.device["interpreted"] and result.device["host"]
    (answer,) = Q.queue_files(tmp_path / "results")
    verdict = json.loads(answer.read_text())
    assert verdict["result"]["status"] == OK and verdict["result"]["device"]["name"] == result.device["name"]
    assert not Q.queue_files(tmp_path / "requests") and not Q.queue_files(tmp_path / "claims")
    assert "1 evaluation(s) done" in out


def test_worker_killed_mid_evaluation_is_recovered_after_its_lease(tmp_path):
    with QueueExecutor(tmp_path, poll_s=0.1) as ex:
        future = ex.submit(request(SLOW_FIRST_CALL))
        first = start_worker(tmp_path, "--lease", "2")
        try:
            wait_for(lambda: evaluating_under(first.pid), what="the first worker to start evaluating")
        finally:
            first_out = stop_worker(first)  # SIGKILL to the worker and its slot's judge process
        assert "evaluating c-test" in first_out
        assert Q.queue_files(tmp_path / "claims") and not future.done()
        second = start_worker(tmp_path, "--once", "--lease", "2")
        try:
            result = future.result(timeout=300)
        finally:
            second.wait(timeout=60)
            second_out = stop_worker(second)
    assert result.status == OK, (result.message, second_out)
    assert "lapsed; put back in the queue" in second_out
    assert len(Q.queue_files(tmp_path / "ledger")) == 1  # asked once, answered once


def test_run_stopped_while_waiting_is_resumed_and_takes_the_result_that_arrived(tmp_path):
    queue = tmp_path / "queue"
    store = Store(str(tmp_path / "runs.db"))
    # No profile job: the ledger below counts evaluations only.
    config = RunConfig(problem="softmax", iterations=0, executor=f"queue:{queue}", compiled_baseline=False,
                       profile="none")
    run = Run.create(config, store=store)
    waiting = threading.Event()
    run.subscribe(lambda e: waiting.set() if isinstance(e, EvaluationWaiting) else None)
    run.start(background=True)
    assert waiting.wait(120), "the run never said it was waiting"
    run.stop()
    assert run.wait(60) == "stopped"
    seed = next(c for c in store.candidates(run.id) if c.kind == "seed")
    assert seed.status == "pending"
    waits = [e for e in store.events(run.id) if e["type"] == "evaluation_waiting"]
    assert waits and "queued for a kscience worker" in waits[0]["payload"]["state"]

    # While the run is stopped, a batch job evaluates what it asked for.
    done = subprocess.run([sys.executable, "-m", "kscience.cli.main", "worker", str(queue), "--once", "--poll", "0.1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert "2 evaluation(s) done" in done.stderr, done.stderr  # the seed and the reference, asked for together
    worker = start_worker(queue)  # for anything the resumed run asks for
    try:
        resumed = Run.resume(run.id, store=store)
        assert resumed.start(background=False).status == "finished", resumed.error
    finally:
        stop_worker(worker)
    seed = store.candidate(seed.id)
    assert seed.status == OK
    assert len(Q.queue_files(queue / "ledger")) == 2  # the seed was not asked for again: seed and reference


def test_the_seed_and_the_baselines_are_asked_for_in_one_batch(tmp_path):
    """With one request in flight at a time (the default), a queue still gets the seed, the eager and the vendor
    baselines at once, before any of them has a result: one batch job judges them all, not three in turn."""
    queue = tmp_path / "queue"
    run = Run.create(RunConfig(problem="matmul", iterations=0, executor=f"queue:{queue}", compiled_baseline=False),
                     store=Store(str(tmp_path / "runs.db")))
    run.start(background=True)
    deadline = time.monotonic() + 60
    while len(Q.queue_files(queue / "requests")) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    run.stop()
    assert run.wait(60) == "stopped"
    asked = [Q.read_json(p)["request"] for p in Q.queue_files(queue / "requests")]
    assert not Q.queue_files(queue / "results")  # no worker ever ran: nothing waited for a verdict
    kinds = sorted("vendor" if "vendor_kernel" in r["source"] else "eager" if "_EAGER" in r["source"] else "seed"
                   for r in asked)
    assert kinds == ["eager", "seed", "vendor"]
    assert [r["baseline"] for r in asked if "_PROBLEM" not in r["source"]] == [False]  # the seed alone is a kernel


def _forge(directory: Path, ident: str, **changes) -> Path:
    sent = Q.read_json(directory / "requests" / f"{ident}.json")
    verdict = EvalResult(status=OK, message="3 shapes correct", geomean_us=1.0, device={"name": "forged"})
    body = Q.result_file(ident, sent["nonce"], EvalRequest(**sent["request"]), verdict, {"host": "x"}, 0.0)
    body.update(changes)
    path = directory / "results" / f"{changes.get('id', ident)}.json"
    path.write_text(json.dumps(body) if not isinstance(changes.get("raw"), str) else changes["raw"])
    return path


def test_malformed_tampered_and_unsolicited_results_are_refused(tmp_path, caplog):
    with QueueExecutor(tmp_path, poll_s=3600) as ex:  # polled by hand below
        future = ex.submit(request())
        ident = Q.queue_files(tmp_path / "requests")[0].stem
        for forged in ({"id": Q.new_id()}, {"nonce": Q.new_id()}, {"source_sha256": Q.digest("something else")},
                       {"raw": "{not json"}, {"result": {"status": "excellent", "message": "", "device": {"n": 1}}}):
            _forge(tmp_path, ident, **forged)  # the first answers a request never made
            ex.poll()
        assert not future.done()
        whys = sorted(p.read_text() for p in (tmp_path / "refused").glob("*.why"))
        assert len(whys) == 5, whys
        for expected in ("never made", "nonce does not match", "different source", "not JSON", "unknown status"):
            assert any(expected in w for w in whys), (expected, whys)
        assert "refused" in caplog.text
        _forge(tmp_path, ident)  # the proper answer still gets through
        ex.poll()
        assert future.result(timeout=1).device == {"name": "forged"}


def test_worker_refuses_a_malformed_request(tmp_path):
    from kscience.evaluate.executors.queue_worker import Worker

    ident = Q.new_id()
    Q.prepare(tmp_path)
    (tmp_path / "requests" / f"{ident}.json").write_text(json.dumps({"kind": "kscience-request", "id": ident}))
    said = []
    worker = Worker(tmp_path, say=said.append)
    try:
        assert not worker._take()
    finally:
        worker.executor.shutdown()
    assert "malformed request" in said[0]
    assert not Q.queue_files(tmp_path / "requests") and len(list((tmp_path / "refused").glob("*.why"))) == 1


def test_queue_spec_is_made_absolute_and_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert RunConfig(problem="softmax", executor="queue:jobs").executor == f"queue:{tmp_path / 'jobs'}"
    with pytest.raises(ValueError, match="queue:DIR"):
        RunConfig(problem="softmax", executor="queue:")


def test_progress_shows_a_waiting_evaluation(capsys):
    from kscience.cli.run_commands import Progress

    Progress(1)(EvaluationWaiting(candidate_id="c-1", iteration=0, state="queued for a kscience worker", waited_s=12))
    assert "c-1 waiting 12 s: queued for a kscience worker" in capsys.readouterr().err


def test_the_result_checker_knows_every_field_of_a_verdict():
    """A field added to EvalResult or ShapeResult must be added to the queue's checker too, or every
    result coming back through a queue is refused as malformed."""
    import dataclasses

    from kscience.evaluate.executors import queue_files
    from kscience.evaluate.result import EvalResult, ShapeResult

    assert set(queue_files._RESULT_TYPES) == {f.name for f in dataclasses.fields(EvalResult)}
    assert set(queue_files._SHAPE_TYPES) == {f.name for f in dataclasses.fields(ShapeResult)}

