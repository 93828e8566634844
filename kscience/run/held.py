"""Optional work that travels with the next evaluation, where the executor judges requests in batches.

A queue served by `kscience worker DIR --once` judges what its folder holds when a batch job starts: a
request written alone waits a whole round trip (about 10 min on a freshly started H200 in a KernelBench
trial) for nothing else. A run's optional work (an Nsight Compute profile of a new best, a pair judged on one
host, kscience.run.confirm) is therefore held until the run next asks for an evaluation and is then written
with it, and the evaluation's caller waits for it to come back too (it comes back in the same batch), so the
next design sees a profile that travelled with the last verdict. When a run's work is done, what is still held is recorded as skipped rather than waited for, and
what went out with the last evaluations comes back with them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass
class Job:
    what: str  # "the Nsight Compute profile of c-1a2b3c4d": one job per `what` is held at a time
    run: Callable[[], Awaitable[None]]  # the work, run once it is released
    skip: Callable[[str], None]  # records it as skipped, with why, when the run ends first


class Held:
    def __init__(self):
        self._jobs: dict[str, Job] = {}
        self.started: list[asyncio.Task] = []  # released with an evaluation, still in flight

    def hold(self, job: Job) -> None:
        self._jobs.setdefault(job.what, job)

    def release(self) -> list[asyncio.Task]:
        """An evaluation was asked for: everything held goes out with it. Returns the jobs it took."""
        jobs, self._jobs = list(self._jobs.values()), {}
        went = [asyncio.create_task(job.run()) for job in jobs]
        self.started += went
        return went

    async def came_back(self, went: list[asyncio.Task]) -> None:
        """Wait for the jobs that went out with one evaluation; the first failure is raised."""
        if went:
            await asyncio.gather(*went)
            self.started = [task for task in self.started if task not in went]

    async def finish(self, why: str) -> None:
        """The run's work is done: what is held is skipped (saying `why`), and what went out with the last
        evaluations is awaited, with anything it held in turn skipped too; the first failure is raised."""
        while True:
            jobs, self._jobs = list(self._jobs.values()), {}
            for job in jobs:
                job.skip(why)
            if not self.started:
                return
            started, self.started = self.started, []
            for outcome in await asyncio.gather(*started, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    raise outcome
