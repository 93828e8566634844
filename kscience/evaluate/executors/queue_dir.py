"""Evaluations through a directory: `--executor queue:DIR` and a `kscience worker DIR` elsewhere.

The GPU Kernel Scientist never owned its GPU: it submitted kernels to an external evaluation
system and read the timings back. This executor does the same with files (see queue_files
for the layout): each request is written to DIR/requests, and the future resolves when a
result for it appears in DIR/results. Whatever moves files serves as transport: a shared
file system, rsync both ways, or a batch job running `kscience worker DIR --once`.

Each request gets a random id and nonce, recorded in DIR/ledger before the request is
written. A result is accepted only when its id is in the ledger, its nonce and source digest
match the record, and its verdict is well formed; anything else is moved to DIR/refused with
the reason, and the evaluation keeps waiting for a proper answer. The ledger also makes a run
resumable: a request made before a stop is found again (by its content), so a resumed run
waits for it, or takes the result that arrived meanwhile, rather than asking twice.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from pathlib import Path

from kscience.evaluate.executors import queue_files as Q
from kscience.evaluate.executors.base import Executor, check_positive
from kscience.evaluate.result import EvalRequest, EvalResult
from kscience.problems import ProblemError


@dataclass
class _Waiting:
    future: Future
    nonce: str
    sha: str
    submitted: float


class QueueExecutor(Executor):
    """`capacity` requests in flight at once (as many as the workers' GPUs, typically)."""

    judges_elsewhere = True  # whatever the workers run on decides what can be profiled there
    batches = True  # a `kscience worker DIR --once` judges what the folder holds when it starts

    def __init__(self, directory: str | Path, capacity: int = 1, poll_s: float = Q.POLL_S):
        check_positive("capacity", capacity)
        self.root = Q.prepare(Path(directory))
        self._capacity, self._poll_s = capacity, poll_s
        self._waiting: dict[str, _Waiting] = {}
        self._by_future: dict[int, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_forever, name="kscience-queue", daemon=True)
        self._poller.start()

    @property
    def capacity(self) -> int:
        return self._capacity

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        key = Q.request_key(request)
        entry = self._ledger_entry(key)
        if entry is None:
            entry = {"id": Q.new_id(), "nonce": Q.new_id(), "key": key, "candidate_id": request.candidate_id,
                     "submitted": time.time()}
            Q.write_atomic(self.root / "ledger" / f"{entry['id']}.json", entry)  # recorded before it is asked
        ident = entry["id"]
        if not any((self.root / d / f"{ident}.json").exists() for d in ("requests", "claims", "results")):
            # New, or asked before and lost on the way (a transport that never delivered it): ask now.
            Q.write_atomic(self.root / "requests" / f"{ident}.json",
                           Q.request_file(ident, entry["nonce"], request, entry["submitted"]))
        future: Future = Future()
        with self._lock:
            self._waiting[ident] = _Waiting(future, entry["nonce"], Q.digest(request.source), time.monotonic())
            self._by_future[id(future)] = ident
        self._collect(ident)  # a result that arrived while the run was stopped is taken at once
        return future

    def _ledger_entry(self, key: str) -> dict | None:
        for path in (self.root / "ledger").glob("*.json"):
            try:
                entry = Q.read_json(path)
            except (OSError, Q.QueueFileError):
                continue
            if entry.get("key") == key and isinstance(entry.get("nonce"), str) and entry.get("id") == path.stem:
                return entry
        return None

    # --- results -------------------------------------------------------------------------------
    def _poll_forever(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.poll()

    def poll(self) -> None:
        """Take every result that answers a waiting request; refuse what answers nothing."""
        for path in Q.queue_files(self.root / "results"):
            self._collect(path.stem, path)

    def _collect(self, ident: str, path: Path | None = None) -> None:
        path = path or self.root / "results" / f"{ident}.json"
        if not path.exists():
            return
        try:
            got_id, nonce, sha, outcome = Q.parse_result(Q.read_json(path), path)
        except FileNotFoundError:
            return
        except Q.QueueFileError as exc:
            Q.refuse(self.root, path, f"malformed result: {exc}")
            return
        ledger = self.root / "ledger" / f"{got_id}.json"
        if not ledger.exists():
            Q.refuse(self.root, path, "a result for a request that was never made (no ledger entry)")
            return
        try:
            entry = Q.read_json(ledger)
        except Q.QueueFileError:
            return
        if nonce != entry.get("nonce"):
            Q.refuse(self.root, path, "the nonce does not match the one recorded for this request")
            return
        with self._lock:
            waiting = self._waiting.get(got_id)
            if waiting is None:  # another run's, or an answer this session no longer waits for
                return
            if sha != waiting.sha:
                Q.refuse(self.root, path, "the result is for a different source than the one requested")
                return
            del self._waiting[got_id]
            self._by_future.pop(id(waiting.future), None)
        try:
            if isinstance(outcome, str):
                waiting.future.set_exception(ProblemError(outcome))
            else:
                waiting.future.set_result(outcome)
        except InvalidStateError:  # cancelled by a stop meanwhile: the result file stays for a resume
            pass

    # --- what a run shows while it waits -------------------------------------------------------
    def wait_state(self, future: Future) -> str | None:
        with self._lock:
            ident = self._by_future.get(id(future))
        if ident is None:
            return None
        holder = self.root / "claims" / f"{ident}.holder"
        if (self.root / "claims" / f"{ident}.json").exists():
            try:
                who = Q.read_json(holder).get("worker", "a worker")
            except (OSError, Q.QueueFileError):
                who = "a worker"
            return f"evaluating on {who} (request {ident[:8]} in {self.root})"
        return f"queued for a kscience worker (request {ident[:8]} in {self.root})"

    def shutdown(self) -> None:
        """Stop waiting. Requests stay in the directory, and their results are taken by a resumed run."""
        self._stop.set()
        self._poller.join(timeout=10)
        with self._lock:
            waiting, self._waiting = list(self._waiting.values()), {}
            self._by_future.clear()
        for w in waiting:
            w.future.cancel()


def queue_directory(spec: str) -> str:
    """The DIR of `queue:DIR`, made absolute (a worker or a resumed run may start elsewhere)."""
    directory = spec.removeprefix("queue:")
    if not directory:
        raise ValueError("queue executor needs a directory: queue:DIR")
    return os.path.abspath(os.path.expanduser(directory))
