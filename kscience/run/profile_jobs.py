"""Nsight Compute profiles during a run: which verdicts get one, and the profile job judged where the
evaluations are (kscience.evaluate.profile.job: local slot, Ray, queue), outside the timed evaluation.

The seed, each new best and the kernel of any plan that asked for it are profiled (kscience.run.profiling
says which). A job takes one slot and never goes ahead of a queued evaluation unless profiling has taken less
than PROFILE_SHARE of the slots' time; where the executor batches, it takes none and is held to go out with
the run's next evaluation (kscience.run.held). Its cost is shown, and never timed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial

from kscience.evaluate import result as R
from kscience.evaluate.profile import job as profile_job
from kscience.problems import Problem
from kscience.run import profiling
from kscience.run.events import CandidateProfiled
from kscience.run.held import Held, Job
from kscience.run.journal import Journal
from kscience.run.slot_use import SlotUse
from kscience.record.candidate import Candidate


class ProfileJobs:
    """`profile` is the profiler the run asks for (None: none); `wait(future, cand, line)` waits for a job's
    answer as for any evaluation (kscience.run.waiting.outcome); `problem_files()` the files every request
    carries."""

    def __init__(self, executor, *, journal: Journal, problem: Problem, use: SlotUse, held: Held, batches: bool,
                 in_flight, wait: Callable[..., Awaitable[R.EvalResult]],
                 problem_files: Callable[[], dict | None], profile: str | None = None):
        self.executor, self.journal, self.problem, self.use, self.held = executor, journal, problem, use, held
        self.batches, self.in_flight, self.wait, self.problem_files = batches, in_flight, wait, problem_files
        self.profile = profile
        self.no_ncu = False  # the judging machine said it has no Nsight Compute: not asked again this run
        self.profile_s = 0.0  # slot seconds this run's profile jobs took, from request to answer
        self.beside: list[asyncio.Task] = []  # profiles no line waits for (`after_verdict`'s `beside`)

    async def after_verdict(self, cand: Candidate, line: int, beside: bool = False) -> None:
        """Profile a newly judged candidate where it is one to profile: now, or held for the next evaluation
        where the executor batches, or (`beside`) while the caller goes on."""
        if not self.profile or self.no_ncu:
            return
        if not (profiling.candidate_to_profile(cand, self.journal.candidates())
                or (cand.ok and "ncu" in self.asked_for(cand))):
            return
        if self.batches:  # alone, a profile job would cost a round trip of its own
            self.held.hold(Job(f"the Nsight Compute profile of {cand.id}", partial(self._profile, cand, line),
                               partial(self._skipped, cand)))
        elif beside:
            self.beside.append(asyncio.create_task(self._profile(cand, line)))
        else:
            await self._profile(cand, line)

    def asked_for(self, cand: Candidate) -> list[str]:
        """The measurements the plan behind a candidate asked for (Plan.measure); [] for none."""
        if not cand.plan_id:
            return []
        row = next((p for p in self.journal.plans() if p.id == cand.plan_id), None)
        return list((row.plan if row else {}).get("measure") or [])

    async def _profile(self, cand: Candidate, line: int) -> None:
        """Nsight Compute on one shape of the candidate, on one slot (none where the executor batches, going out
        with the evaluation that released it)."""
        shape = profiling.profile_shape(self.problem, cand.stored_result)
        if shape is None or self.no_ncu:
            return
        slots = self.use.slots
        if self.batches:
            answer = await self._job(cand, shape, line, None)
        else:
            async with slots.profiling:
                if self.no_ncu:  # said by the profile job this one waited behind
                    return
                await slots.no_baselines_out.wait()
                answer = await self._job(cand, shape, line, await self.slot_for_profile())
        record = answer.profile
        if record is not None:
            self.journal.record_profile(cand.id, **record)
        elif answer.profile_said.startswith(profile_job.NO_NCU):
            self.no_ncu = True
        self.journal.emit(CandidateProfiled(
            candidate_id=cand.id, iteration=cand.iteration, profiler="ncu", profile_s=record and record["profile_s"],
            message=profiling.profiled_line(cand.id, record, [answer.profile_said], host=answer.judged_on.host)))

    async def _job(self, cand: Candidate, shape: dict, line: int, slot: int | None) -> R.EvalResult:
        """The profile job's answer; `slot` (released here) is the one it holds, None for none."""
        problem = self.problem
        started, future = time.monotonic(), None
        try:
            self.journal.stage("profile", cand.iteration, cand.id, line)
            request = R.EvalRequest(problem=problem.locator, problem_files=self.problem_files(), source=cand.source,
                                    overrides=dict(problem.overrides), candidate_id=cand.id, measure=[],
                                    profile_shape=shape)
            future = self.executor.submit(request)
            self.in_flight.add(f"the Nsight Compute profile of {cand.id}", future)
            return await self.wait(future, cand, line)
        finally:
            self.in_flight.discard(future)
            self.profile_s += time.monotonic() - started
            self.use.slots.profile_s += time.monotonic() - started
            if slot is not None:
                self.use.slots.give(slot)

    async def slot_for_profile(self) -> int:
        """A free slot once no evaluation waits for one, or ahead of them while profiling's share of the slots'
        time (every run's that shares them) stays within PROFILE_SHARE."""
        slots = self.use.slots
        return await self.use.idle_slot(lambda: slots.profile_s <= profiling.PROFILE_SHARE * slots.capacity
                                        * slots.elapsed_s())

    def _skipped(self, cand: Candidate, why: str) -> None:
        self.journal.emit(CandidateProfiled(candidate_id=cand.id, iteration=cand.iteration, profiler="ncu",
                                            profile_s=None, message=f"profile ncu: {cand.id} not profiled: {why}"))
