"""One run's use of the evaluation slots in this session: taking one (queued, or once no evaluation waits),
and how long each was busy.

The slots are the run's own, or shared with the other runs of a campaign (kscience.run.slots), which hand
them out by what each run's `SlotUse` says of itself (`expected_s`, `work_s`). A slot's busy time is what
the loop sees: from the request to its verdict (for a queue executor this includes the wait for a worker to
claim it), and the part of it judged on a GPU. Busy time and this session's wall time are stored after each
evaluation and at the end (`save`), so a `kill -9` loses at most the wall time since the last verdict.
"""

from __future__ import annotations

import asyncio
import math
import time

from kscience.run.events import EvaluationWaiting
from kscience.run.in_flight import InFlight
from kscience.run.journal import Journal, Stopping
from kscience.run import waiting
from kscience.run.slots import Slots
from kscience.record.snapshot import first_of_kind
from kscience.record.candidate import EAGER_KIND, Candidate

IDLE_LOOK_S = 0.2  # how often a profile job or torch.compile's baseline waiting for an idle slot looks for a stop


class SlotUse:
    """This run's share of `slots`: it is the owner the slots hand them to, and one of their `users`."""

    def __init__(self, slots: Slots, *, journal: Journal, stopping: Stopping, in_flight: InFlight):
        self.slots, self.journal, self.stopping, self.in_flight = slots, journal, stopping, in_flight
        self.slots.users.append(self)
        self.capacity = slots.capacity
        self.started = time.time()  # this session's clock, for busy fractions
        self._t0 = time.monotonic()
        self.busy_s = [0.0] * self.capacity
        self.gpu_busy_s = [0.0] * self.capacity  # of busy_s: evaluations judged on a GPU
        self.evaluations = [0] * self.capacity
        self._baselines_timed_s, self._baselines_timed = 0.0, 0  # of busy_s: the idle-slot baselines' share
        self.asked = 0  # evaluations asked for and not yet over: waiting for a slot or in flight

    def elapsed_s(self) -> float:
        """Seconds since this session started."""
        return time.monotonic() - self._t0

    # --- what the run says of itself -------------------------------------------------------------
    def verdicts_in_s(self) -> float | None:
        """Seconds until the evaluations asked for now all have their verdicts, from this session's own timings:
        the mean time an evaluation was in flight (a queue's round trip included), once per round of
        `capacity` evaluations they fill, and no sooner than the slots' whole backlog where other runs share
        them (kscience.run.slots); None until one has been timed."""
        mean = self._mean_s()
        if mean is None:
            return None
        return max(mean * math.ceil(self.asked / self.capacity), self.slots.backlog_s() or 0.0)

    def work_s(self) -> float | None:
        """This run's evaluations asked for now at its mean evaluation time; None until one has been timed."""
        mean = self._mean_s()
        return None if mean is None else mean * self.asked

    def _mean_s(self) -> float | None:
        timed = sum(self.evaluations) - self._baselines_timed  # a minutes-long torch.compile is no candidate
        return (sum(self.busy_s) - self._baselines_timed_s) / timed if timed else None

    def expected_s(self) -> float | None:
        """How long one evaluation of this problem takes: its seed's, else its reference's, as judged (None until
        one is). The shared slots serve the longest first."""
        for kind in ("seed", EAGER_KIND):
            judged = first_of_kind(self.journal.candidates(), kind)
            if judged is not None and judged.result is not None and judged.result.wall_s:
                return judged.result.wall_s
        return None

    # --- taking and giving slots -----------------------------------------------------------------
    async def queued_for_slots(self, cand: Candidate, line: int, count: int = 1) -> list[int]:
        """`count` slots, as the shared slots hand them out. While they are not free, the candidate says every
        waiting.RUNNING_SAY_S that it is queued and behind what: it has not started, whatever the evaluations holding
        the slots are doing."""
        taken = self.slots.take_now(self, count)
        if taken is not None:  # taken without yielding: the seed's request goes out before the baselines'
            return taken
        getter, since = self.slots.wait(self, self.expected_s(), count), time.monotonic()
        try:
            while not (await asyncio.wait({getter}, timeout=waiting.RUNNING_SAY_S))[0]:
                self.journal.emit(EvaluationWaiting(candidate_id=cand.id, iteration=cand.iteration,
                                                    state=self.in_flight.queued(),
                                                    waited_s=round(time.monotonic() - since, 1), line=line))
            return getter.result()
        except BaseException:
            self.slots.withdraw(getter)  # slots it was handed as the wait ended go back
            raise

    async def idle_slot(self, may_go_first=lambda: False) -> int:
        """A free slot once no evaluation waits for one, or ahead of them while `may_go_first()`; a stop ends the
        wait within IDLE_LOOK_S."""
        getter = self.slots.wait_idle(self, may_go_first)
        try:
            while not (await asyncio.wait({getter}, timeout=IDLE_LOOK_S))[0]:
                self.stopping.check()
            (slot,) = getter.result()
            return slot
        except BaseException:
            self.slots.withdraw(getter)
            raise

    def held(self, slot: int, seconds: float, *, on_gpu: bool, idle_slot_baseline: bool) -> None:
        """An evaluation held `slot` for `seconds` (judged on a GPU or not); `idle_slot_baseline`: a baseline that
        waited for an idle slot, left out of the mean evaluation time."""
        self.busy_s[slot] += seconds
        self.gpu_busy_s[slot] += seconds if on_gpu else 0.0
        self.evaluations[slot] += 1
        if idle_slot_baseline:
            self._baselines_timed_s += seconds
            self._baselines_timed += 1

    # --- busy time -------------------------------------------------------------------------------
    def save(self) -> None:
        """Store each slot's busy time and evaluations with this session's wall time so far."""
        wall = self.elapsed_s()
        for slot in range(self.capacity):
            self.journal.store.record_slot_time(self.journal.run_id, session=self.started, slot=slot, wall_s=wall,
                                                busy_s=self.busy_s[slot], evaluations=self.evaluations[slot],
                                                gpu_busy_s=self.gpu_busy_s[slot])
