"""`kscience worker DIR`: evaluate the requests a run left in DIR and write the verdicts back.

Runs on the machine with the GPUs, through the same judge as a local run (a `LocalExecutor`,
one slot per GPU). A request is taken by renaming it into DIR/claims, which succeeds for one
worker only; while it is evaluated the worker touches the claim every few seconds, and a
claim left untouched for longer than its lease (a worker killed, a node lost) is put back in
DIR/requests by whichever worker notices first. `--once` evaluates what is there, waiting
for any claim held elsewhere to be answered or to lapse, and exits: the shape of a batch job.
Without it the worker waits for more until interrupted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from pathlib import Path

from kscience.evaluate.executors import queue_files as Q
from kscience.evaluate.executors.base import LocalExecutor
from kscience.evaluate.executors.slot import EvaluationInterrupted
from kscience.evaluate.sandbox.workers import hide_from_workers
from kscience.problems import ProblemError


def _age(path: Path) -> float:
    st = path.stat()
    return time.time() - max(st.st_mtime, st.st_ctime)  # a rename changes ctime: a fresh claim is young


class Worker:
    def __init__(self, directory: str | Path, *, gpus: int | None = None, cpu_workers: int | None = None,
                 lease_s: float = Q.LEASE_S, poll_s: float = Q.POLL_S, say=print):
        self.root = Q.prepare(Path(directory))
        hide_from_workers(self.root)  # its nonces and pending sources are not for the candidates it judges
        self.lease_s, self.poll_s, self.say = lease_s, poll_s, say
        self.name = f"{socket.gethostname()} pid {os.getpid()}"
        self.executor = LocalExecutor(gpus=gpus, cpu_workers=cpu_workers)
        self.in_flight: dict = {}  # id -> (future, nonce, request)
        self._stop = threading.Event()
        self.done = 0

    # --- claims ------------------------------------------------------------------------------
    def _claim_path(self, ident: str) -> Path:
        return self.root / "claims" / f"{ident}.json"

    def recover_lapsed(self) -> None:
        """Put back requests whose holder stopped renewing its claim."""
        for claim in Q.queue_files(self.root / "claims"):
            ident = claim.stem
            if ident in self.in_flight:
                continue
            holder = claim.with_suffix(".holder")
            try:
                info = Q.read_json(holder)
                lease = float(info.get("lease_s", Q.LEASE_S))
            except (OSError, Q.QueueFileError, TypeError, ValueError):
                info, lease = {}, Q.LEASE_S
            try:
                seen = claim.stat().st_mtime
                if _age(claim) <= lease:
                    continue
                # Rename first, to a name only this worker knows: of two workers recovering at once
                # one wins; then look again (renewals change mtime; the rename changed only ctime), in
                # case the holder renewed it just before.
                aside = claim.with_name(f".{claim.name}.{secrets.token_hex(4)}.lapsed")
                os.rename(claim, aside)
            except FileNotFoundError:
                continue
            if aside.stat().st_mtime != seen:
                os.rename(aside, claim)
                continue
            os.replace(aside, self.root / "requests" / claim.name)
            holder.unlink(missing_ok=True)
            self.say(f"request {ident[:8]}: the claim of {info.get('worker', 'a worker')} lapsed; "
                     "put back in the queue")

    def _take(self) -> bool:
        """Claim and start the oldest request; False when there is none."""
        for path in Q.queue_files(self.root / "requests"):
            claim = self._claim_path(path.stem)
            answered = (self.root / "results" / path.name).exists()
            if answered or claim.exists():
                path.unlink(missing_ok=True)  # sent twice (a resumed run, a second copy): answered or under way
                self.say(f"request {path.stem[:8]}: sent again, already {'answered' if answered else 'claimed'}")
                continue
            try:
                os.rename(path, claim)
            except FileNotFoundError:
                continue  # another worker took it
            os.utime(claim)
            try:
                ident, nonce, request = Q.parse_request(Q.read_json(claim), claim)
            except Q.QueueFileError as exc:
                Q.refuse(self.root, claim, f"malformed request: {exc}")
                self.say(f"refused {path.name}: malformed request: {exc}")
                continue
            Q.write_atomic(claim.with_suffix(".holder"), {"worker": self.name, "lease_s": self.lease_s,
                                                           "claimed": time.time()})
            self.say(f"request {ident[:8]}: evaluating {request.candidate_id or 'a candidate'} of {request.problem}")
            self.in_flight[ident] = (self.executor.submit(request), nonce, request)
            return True
        return False

    def _renew(self) -> None:
        while not self._stop.wait(min(self.lease_s / 4, 5.0)):
            for ident in list(self.in_flight):
                with contextlib.suppress(FileNotFoundError):
                    os.utime(self._claim_path(ident))

    # --- results -----------------------------------------------------------------------------
    def _finish(self, ident: str) -> None:
        future, nonce, request = self.in_flight[ident]
        try:
            outcome = future.result()
            outcome.device["host"] = socket.gethostname()  # which machine of a cluster judged it
            line = f"{outcome.status}: {outcome.message} ({outcome.wall_s:.1f} s on {outcome.device.get('name')})"
        except ProblemError as exc:
            outcome, line = str(exc), f"problem error: {exc}"
        except EvaluationInterrupted:  # a signal stopped the slot: `run` hands the request back to the queue
            raise KeyboardInterrupt from None
        del self.in_flight[ident]
        worker = {"host": socket.gethostname(), "pid": os.getpid()}
        Q.write_atomic(self.root / "results" / f"{ident}.json",
                       Q.result_file(ident, nonce, request, outcome, worker, time.time()))
        self._claim_path(ident).unlink(missing_ok=True)
        self._claim_path(ident).with_suffix(".holder").unlink(missing_ok=True)
        self.done += 1
        self.say(f"request {ident[:8]}: {line}")

    def _release_all(self) -> None:
        """Interrupted: hand unfinished requests back at once rather than after their lease."""
        for ident, (future, _, _) in list(self.in_flight.items()):
            future.cancel()
            claim = self._claim_path(ident)
            with contextlib.suppress(FileNotFoundError):
                os.replace(claim, self.root / "requests" / claim.name)
            claim.with_suffix(".holder").unlink(missing_ok=True)
            self.say(f"request {ident[:8]}: handed back to the queue")
        self.in_flight.clear()

    def run(self, once: bool = False) -> int:
        """Evaluate until interrupted (or, with `once`, until nothing is left to take); returns how many."""
        renewer = threading.Thread(target=self._renew, daemon=True)
        renewer.start()
        self.say(f"kscience worker {self.name}: {self.executor.capacity} slot(s), watching {self.root}")
        try:
            while True:
                self.recover_lapsed()
                while len(self.in_flight) < self.executor.capacity and self._take():
                    pass
                for ident in [i for i, (f, _, _) in self.in_flight.items() if f.done()]:
                    self._finish(ident)
                # A batch job waits for claims too: a killed job's claims come back once their lease lapses.
                if once and not self.in_flight and not Q.queue_files(self.root / "requests") \
                        and not Q.queue_files(self.root / "claims"):
                    return self.done
                time.sleep(self.poll_s if not self.in_flight else min(self.poll_s, 0.2))
        except KeyboardInterrupt:
            self._release_all()
            raise
        finally:
            self._stop.set()
            self.executor.shutdown()

