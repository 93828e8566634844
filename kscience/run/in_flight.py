"""The evaluations a run has handed to its executor and not yet had back, in the words shown to one that
waits: "queued behind torch.compile of PyTorch eager c-42f079d9 (checking correctness, in flight 6m02s)".

An evaluation waits twice before its judge starts: for one of the run's slots (kscience.run.slot_use), and
then inside the executor, behind the cheap baselines judged beside the slots. Until it starts it is shown
queued, and behind what: never with the phase of the evaluation that holds the slot it waits for. A future
of concurrent.futures' pools (the local and Ray executors) says whether it has started; the queue executor
says what its requests wait for itself (`Executor.wait_state`).
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass

from kscience.record.store import BASELINE_KINDS
from kscience.record.text import fmt_duration, kind_text
from kscience.record.candidate import Candidate


@dataclass
class Handed:
    what: str  # "child c-1a34ed51", "torch.compile of PyTorch eager c-42f079d9"
    future: Future
    since: float  # time.monotonic() when it was handed over


def has_started(future: Future) -> bool:
    return future.running() or future.done()


def name(cand: Candidate) -> str:
    """A baseline by what it times (its hypothesis up to any parenthesis), any other candidate by its kind."""
    what = cand.hypothesis.split(" (")[0] if cand.kind in BASELINE_KINDS else kind_text(cand.kind)
    return f"{what} {cand.id}"


class InFlight:
    def __init__(self, executor):
        self.executor = executor
        self._handed: dict[int, Handed] = {}  # id(future) -> what it judges

    def add(self, what: str, future: Future) -> None:
        self._handed[id(future)] = Handed(what, future, time.monotonic())

    def discard(self, future: Future | None) -> None:
        self._handed.pop(id(future), None)

    def queued(self, future: Future | None = None) -> str:
        """How a waiting evaluation (`future`, once it has one) is shown: queued behind the evaluations being
        judged now, each with what its judge is doing where the executor says; behind every other one handed
        over where none says it has started (an executor whose futures never do)."""
        others = [h for h in self._handed.values() if h.future is not future and not h.future.done()]
        ahead = [h for h in others if has_started(h.future)] or others
        if not ahead:
            return "queued for the next free slot"
        now = time.monotonic()
        return "queued behind " + "; ".join(f"{h.what} ({self.executor.doing(h.future) or 'being judged'}, "
                                            f"in flight {fmt_duration(now - h.since)})" for h in ahead)
