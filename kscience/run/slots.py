"""The evaluation slots of one executor, and who gets the next free one.

A run alone has the slots of its own executor. A campaign's runs judge through one executor, so they
share one `Slots` (kscience.campaigns.scheduler): every run's `SlotUse` (kscience.run.slot_use) asks it for
a slot before each evaluation and gives the slot back after the verdict. Nothing of one run's waits behind a slot that
another run leaves idle, because a slot given back goes at once to the next one waiting:

1. work waiting for an idle slot that may go first now (a profile job within its share of the slots'
   time, kscience.run.profiling.PROFILE_SHARE);
2. else an evaluation: the one whose run holds the fewest slots now (slots are shared out across the
   problems first), then the one whose problem's evaluations take longest (`expected_s`: from its seed's
   evaluation or its reference's; unknown counts as longest, so every problem's seed goes early), then the
   one that asked first. Longest first is the rule for finishing a set of jobs of unequal length on
   several machines soonest (the cost of one KernelBench task's evaluation varies about 23x);
3. else work waiting for an idle slot (profile jobs, torch.compile's baseline): it never holds back an
   evaluation.

A request for two slots at once (a same-host confirmation) is served when two are free, and nothing
behind it is served before it. What the slots did is counted here for the campaign's record: slot-seconds
held (`busy_s`), and slot-seconds left free while an evaluation waited (`idle_waiting_s`), which the hand-
out rule keeps at zero but for a pair waiting for its second slot.

All of it runs on the one event loop that drives the runs sharing it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from kscience.run.in_flight import InFlight


@dataclass
class _Waiter:
    owner: object  # the run's SlotUse (kscience.run.slot_use)
    count: int
    seq: int
    future: asyncio.Future
    expected_s: float | None = None  # evaluations only
    may_go_first: Callable[[], bool] | None = None  # idle-slot work only
    idle: bool = False


@dataclass
class _Held:
    owner: object
    since: float


@dataclass
class Slots:
    """`capacity` slots numbered 0..capacity-1; `in_flight` is what every run sharing them has handed to the
    executor (what a queued evaluation is shown to wait behind)."""

    capacity: int
    in_flight: InFlight
    clock: Callable[[], float] = time.monotonic
    busy_s: float = 0.0  # slot-seconds of holds that have ended
    idle_waiting_s: float = 0.0  # slot-seconds a slot was free while an evaluation waited
    holds: int = 0  # slots handed out
    profile_s: float = 0.0  # slot-seconds of profile jobs, every run's
    baselines_out: int = 0  # cheap baselines in flight beside the slots, every run's
    users: list = field(default_factory=list)  # the runs' SlotUses sharing these slots

    def __post_init__(self):
        self.capacity = max(1, self.capacity)
        self.started = self._last = self.clock()
        self._free = list(range(self.capacity))
        self._held: dict[int, _Held] = {}
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        # One profile job at a time on these slots, and none beside a cheap baseline's timing (its counters
        # would share the GPU with it): every run's, since the runs share the GPUs.
        self.profiling = asyncio.Lock()
        self.no_baselines_out = asyncio.Event()
        self.no_baselines_out.set()

    @classmethod
    def of(cls, executor) -> "Slots":
        return cls(capacity=executor.capacity, in_flight=InFlight(executor))

    # --- what the runs ask ---------------------------------------------------------------------
    def take_now(self, owner, count: int = 1) -> list[int] | None:
        """`count` free slots at once, without waiting, when no one is waiting ahead; else None."""
        self._tick()
        if self._waiting or len(self._free) < count:
            return None
        return self._hand(owner, count)

    def wait(self, owner, expected_s: float | None, count: int = 1) -> asyncio.Future:
        """A future of `count` slots for an evaluation of `owner`'s run, whose problem's evaluations take about
        `expected_s` (None: not known yet). Withdraw it with `withdraw` if it is no longer wanted."""
        return self._enqueue(_Waiter(owner, count, next(self._seq), self._future(), expected_s=expected_s))

    def wait_idle(self, owner, may_go_first: Callable[[], bool] = lambda: False) -> asyncio.Future:
        """A future of one slot for work that waits for an idle slot: it goes once no evaluation waits, or ahead
        of them while `may_go_first()`."""
        return self._enqueue(_Waiter(owner, 1, next(self._seq), self._future(), may_go_first=may_go_first,
                                     idle=True))

    def withdraw(self, future: asyncio.Future) -> None:
        """No longer wanted: a waiter leaves the queue; slots it was handed meanwhile come back."""
        self._tick()
        self._waiting = [w for w in self._waiting if w.future is not future]
        if future.done() and not future.cancelled():
            for slot in future.result():
                self.give(slot)
        else:
            future.cancel()
        self._serve()

    def give(self, slot: int) -> None:
        """A slot back after its work; it goes to whoever waits next."""
        self._tick()
        held = self._held.pop(slot)
        self.busy_s += self.clock() - held.since
        self._free.append(slot)
        self._free.sort()
        self._serve()

    # --- what they read ------------------------------------------------------------------------
    def evaluations_waiting(self) -> int:
        return sum(not w.idle for w in self._waiting)

    def held_by(self, owner) -> int:
        return sum(h.owner is owner for h in self._held.values())

    def free(self) -> int:
        return len(self._free)

    def busy_now_s(self) -> float:
        """Slot-seconds held so far, the holds under way included."""
        now = self.clock()
        return self.busy_s + sum(now - h.since for h in self._held.values())

    def idle_waiting_now_s(self) -> float:
        self._tick()
        return self.idle_waiting_s

    def backlog_s(self) -> float | None:
        """Seconds the slots need for the evaluations asked for now, every run's at its own mean evaluation time
        so far (`SlotUse.work_s`, kscience.run.slot_use); None until one has been timed."""
        work = [w for w in (user.work_s() for user in self.users) if w is not None]
        return sum(work) / self.capacity if work else None

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    # --- the hand-out rule ---------------------------------------------------------------------
    def _future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()

    def _enqueue(self, waiter: _Waiter) -> asyncio.Future:
        self._tick()
        self._waiting.append(waiter)
        self._serve()
        return waiter.future

    def _hand(self, owner, count: int) -> list[int]:
        taken, self._free = self._free[:count], self._free[count:]
        now = self.clock()
        for slot in taken:
            self._held[slot] = _Held(owner, now)
        self.holds += count
        return taken

    def _next(self) -> _Waiter | None:
        live = [w for w in self._waiting if not w.future.done()]
        self._waiting = live
        first = [w for w in live if w.idle and w.may_go_first()]
        if first:
            return first[0]
        evaluations = [w for w in live if not w.idle]
        if evaluations:
            return min(evaluations, key=lambda w: (self.held_by(w.owner),
                                                   -(math.inf if w.expected_s is None else w.expected_s), w.seq))
        return live[0] if live else None

    def _serve(self) -> None:
        while self._free:
            waiter = self._next()
            if waiter is None or waiter.count > len(self._free):
                return  # nothing waits, or a pair waits for its second slot and goes before anything behind it
            self._waiting.remove(waiter)
            waiter.future.set_result(self._hand(waiter.owner, waiter.count))

    def _tick(self) -> None:
        """Count the slot-seconds left free while an evaluation waited, up to now."""
        now = self.clock()
        if self._free and self.evaluations_waiting():
            self.idle_waiting_s += (now - self._last) * len(self._free)
        self._last = now
