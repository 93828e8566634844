"""A campaign's problems at once: one executor, and one set of slots, shared by every problem's run.

The runs of a campaign go on together on one event loop, up to `--problems-at-once K` of them; as one ends,
the next problem starts. They all judge through one executor (local GPUs, CPU slots, a Ray cluster, queue
workers) and take its slots from one `kscience.run.slots.Slots`, which hands each free slot to the waiting
evaluation whose run holds the fewest slots, then whose problem's evaluations take longest. So the slots
stay busy while each run's model thinks: with one problem at a time a GPU waits for every design and every
write, with K problems another run's evaluation is usually waiting.

The problems start in this order: runs a killed campaign left unfinished first (resumed, not begun again),
then problems no run of this database has timed yet, in the suite's order, then the rest longest first by
their seed's or reference's evaluation time in an earlier run (PROBLEMS_PER_SLOT sets the default K).
Each session of the campaign records its wall time and what the shared slots did (`campaign_sessions`)
every SAVE_S seconds and as each problem changes, so a `kill -9` loses at most that much.
"""

from __future__ import annotations

import asyncio
import math
import time

from kscience.record.rows import CampaignProblem
from kscience.record.store import Store
from kscience.run.driver import Run
from kscience.run.slots import Slots
from kscience.record.candidate import EAGER_KIND

# Problems at once per evaluation slot by default: with a model several times slower than an evaluation, a run
# has an evaluation waiting a fraction of its time only; eight lines of one run kept one H200 busy 0.95 of the
# time with a 30 s model, one line 0.30 (benchmarks/search_throughput.py, benchmarks/results/README.md).
PROBLEMS_PER_SLOT = 8
SAVE_S = 10.0  # how often a session's record is brought up to date while nothing else changes


def problems_at_once(setting: int | None, problems: int, slots: int) -> int:
    """K: as set, else enough runs to keep every slot busy (PROBLEMS_PER_SLOT per slot); never more than there
    are problems."""
    return max(1, min(problems, setting or PROBLEMS_PER_SLOT * slots))


def lines_per_run(setting: int | None, slots: int, at_once: int) -> int:
    """A run's --lines: as set, else the slots' share of each of the K runs at once (one line per slot, as a run
    alone has, shared out), at least one."""
    return setting or max(1, math.ceil(slots / at_once))


def earlier_evaluation_s(store: Store, locator: str) -> float | None:
    """How long an evaluation of this problem took in an earlier run of the store: its newest judged seed's,
    else its reference's; None where none was judged."""
    for run in reversed(store.list_runs()):
        if run.problem != locator:
            continue
        for kind in ("seed", EAGER_KIND):
            judged = next((c for c in store.candidates(run.id) if c.kind == kind and c.result is not None
                           and c.result.wall_s), None)
            if judged is not None:
                return judged.result.wall_s
    return None


class Session:
    """What one session of a campaign did with the slots its runs shared, kept in the store."""

    def __init__(self, store: Store, campaign_id: str, slots: Slots, at_once: int):
        self.store, self.campaign_id, self.slots, self.at_once = store, campaign_id, slots, at_once
        self.started, self._t0 = time.time(), time.monotonic()

    def save(self) -> None:
        self.store.record_campaign_session(
            self.campaign_id, session=self.started, wall_s=time.monotonic() - self._t0, slots=self.slots.capacity,
            busy_s=self.slots.busy_now_s(), idle_waiting_s=self.slots.idle_waiting_now_s(),
            problems_at_once=self.at_once)

    async def save_every(self, seconds: float = SAVE_S) -> None:
        while True:
            await asyncio.sleep(seconds)
            self.save()


class Scheduler:
    """Drives the problems of one campaign session. `open_run(row, shared)` is the campaign's: the problem's
    run, resumed or new, or None where the problem is skipped or done; it calls `shared()` for the executor, the
    slots and the run's --lines once it knows the problem runs. `finished(row, run)` is told as each run ends;
    `stopping()` says whether to start no more."""

    def __init__(self, store: Store, campaign_id: str, *, make_executor, at_once: int | None, lines: int | None,
                 open_run, finished, stopping):
        self.store, self.campaign_id = store, campaign_id
        self._make_executor, self._at_once, self._lines = make_executor, at_once, lines
        self._open_run, self._finished, self._stopping = open_run, finished, stopping
        self.executor = self.slots = self.session = None
        self.runs: list[Run] = []  # the runs going on now

    def order(self, rows: list[CampaignProblem], resuming: set[int]) -> list[CampaignProblem]:
        """The problems to work on, in the order they start (see the module's docstring)."""
        timed = {r.position: earlier_evaluation_s(self.store, r.locator) for r in rows}
        return sorted(rows, key=lambda r: (r.position not in resuming, timed[r.position] is not None,
                                           -(timed[r.position] or 0.0), r.position))

    def _shared(self, problems: int) -> tuple:
        """The executor, its slots and a run's --lines; the executor is made when the first run needs it (none
        for a campaign whose problems are all skipped or done)."""
        if self.executor is None:
            self.executor = self._make_executor()
            self.slots = Slots.of(self.executor)
            at_once = problems_at_once(self._at_once, problems, self.slots.capacity)
            self.session = Session(self.store, self.campaign_id, self.slots, at_once)
        return self.executor, self.slots, lines_per_run(self._lines, self.slots.capacity, self.session.at_once)

    async def drive(self, rows: list[CampaignProblem], resuming: set[int]) -> bool:
        """Work on every row until all are done or a stop; True when nothing was left undone."""
        waiting = self.order(rows, resuming)
        going: dict[asyncio.Task, dict] = {}
        saver: asyncio.Task | None = None
        try:
            while True:
                while waiting and not self._stopping() and (self.session is None or len(going) < self.session.at_once):
                    row, problems = waiting.pop(0), len(waiting) + len(going) + 1
                    run = self._open_run(row, lambda: self._shared(problems))
                    if run is not None:
                        going[asyncio.create_task(self._drive_one(row, run))] = row
                        saver = saver or asyncio.create_task(self.session.save_every())
                if not going:
                    break
                done, _ = await asyncio.wait(going, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    del going[task]
                    task.result()  # a run's own failures end its run; anything raised here is the campaign's
                if self.session is not None:
                    self.session.save()
        except BaseException:
            for run in self.runs:
                run.stop()  # a run ends after its evaluations in flight, as a stopped run does
            for task in going:
                task.cancel()
            await asyncio.gather(*going, return_exceptions=True)
            raise
        finally:
            if saver is not None:
                saver.cancel()
            if self.session is not None:
                self.session.save()
        return not waiting

    async def _drive_one(self, row: CampaignProblem, run: Run) -> None:
        self.runs.append(run)
        try:
            await run.run_async()
        finally:
            self.runs.remove(run)
            self._finished(row, run)
