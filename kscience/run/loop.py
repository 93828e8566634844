"""The controller: one session of a run, from its seed and baselines to its lines' last finding.

It judges the seed (repaired if it fails) and the baselines, then keeps up to `lines` lines of work going
at once (kscience.run.scheduling; one line is kscience.run.line). A line is one iteration: select a base,
design, then write -> evaluate -> repair -> finding for each chosen plan. With one line, iterations follow
one another as design rounds always did; with K lines, K iterations run at once on their own clocks, sharing
the population, every finding recorded so far and the evaluation slots (kscience.run.judging), so the
evaluator keeps working while the model thinks.

Every step reads what it needs from the store and commits what it produced before the next step
starts, so the controller can be dropped at any point (stop, failure, `kill -9`) and a new one
continues where it left off: a candidate still `pending` is evaluated, a failed one is repaired if
it has attempts left, and each iteration with a plan but no finding is finished as a line of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from functools import partial

from kscience.run import baseline_cache, confirm, profiling
from kscience.run.baselines import (REUSED_BASELINES, compiled_baseline_wanted, compiled_source, library_candidate,
                                    library_title, reference_source, vendor_alone_source, vendor_source,
                                    vendor_title)
from kscience.evaluate.result import DeviceRecord
from kscience.evaluate.executors.base import Executor
from kscience.run.budget import EvaluationBudget, EvaluationsSpent
from kscience.run.config import RunConfig
from kscience.run.events import CandidateProfiled, CandidateWritten, EventBus, Notice
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.run.judging import Judging
from kscience.run.line import RunError
from kscience.run.verdict import Verdict
from kscience.run.log import EARLIER_SEED_MARK
from kscience.run.population import Population
from kscience.run.seed_chain import judge_again, seed_failure
from kscience.run.scheduling import LineScheduler
from kscience.run.slots import Slots
from kscience.problems import Problem
from kscience.problems.libraries import missing_line, skipped_line
from kscience.record.candidate import Candidate, result_from_stored
from kscience.record.snapshot import first_of_kind, iterations_done
from kscience.record.store import PENDING, Store

__all__ = ["Controller", "RunError", "Stopped"]


class Controller:
    """Drives one session of a run: `config` gives its settings (--repairs, --lines, --evaluations, the
    time limits, --profile, --stop-at-sol, --precision, whether to time torch.compile), `stop` is set by the
    user (Run.stop); `slots` are the executor's slots where other runs share them (kscience.run.slots)."""

    def __init__(self, *, store: Store, run_id: str, problem: Problem, scientist, executor: Executor,
                 bus: EventBus, config: RunConfig, seed_source: str, stop: threading.Event, slots: Slots | None = None):
        self.store, self.run_id, self.problem = store, run_id, problem
        self.scientist, self.executor, self.bus, self.slots = scientist, executor, bus, slots
        self.repairs = config.repairs
        self.seed_source, self.reference_source = seed_source, reference_source(problem)
        self.compiled_source, self.compiled_baseline = compiled_source(problem), config.compiled_baseline
        self.vendor_source = vendor_source(problem)
        self.journal = Journal(store, run_id, bus)
        self.stopping = Stopping(stop)
        self.budget = EvaluationBudget(self.journal, config.evaluations)
        self.population = Population(self.journal, problem, scientist)
        self.lines = max(1, config.lines or executor.capacity)  # default: one line per evaluation slot
        self.eval_timeout_s, self.time_limit_s = config.eval_timeout_s, config.time_limit_s
        self.build_limit_s = config.build_limit_s
        self.profile, self.stop_at_sol, self.precision = config.profile, config.stop_at_sol, config.precision
        self.judging: Judging | None = None  # made on the run's event loop (its slots are an asyncio.Queue)
        self.scheduler: LineScheduler | None = None  # made with the judging
        # Set by each verdict recorded (kscience.run.judging) and each line whose candidates are all
        # written: either may let the scheduler start a line.
        self.changed = asyncio.Event()
        self._beside: list[asyncio.Task] = []  # the baselines, judged while the lines work (see _roots)

    # --- the run -----------------------------------------------------------------------------
    async def run_iterations(self, target: int) -> None:
        """Bring the run to `target` iterations (designs), finishing any interrupted work first."""
        self.judging = Judging(self.executor, journal=self.journal, stopping=self.stopping, budget=self.budget,
                               problem=self.problem, changed=self.changed, eval_timeout_s=self.eval_timeout_s,
                               time_limit_s=self.time_limit_s, build_limit_s=self.build_limit_s, slots=self.slots,
                               precision=self.precision)
        self.population.rules_of = self.judging.rules
        self.scheduler = LineScheduler(journal=self.journal, stopping=self.stopping, budget=self.budget,
                                       judging=self.judging, population=self.population, scientist=self.scientist,
                                       problem=self.problem, repairs=self.repairs, lines=self.lines,
                                       stop_at_sol=self.stop_at_sol, changed=self.changed)
        try:
            if self.iterations_done() < target:
                # Fail fast: a dead endpoint, or a scientist that cannot work on this problem, is found
                # before minutes of seed and baseline timing.
                kernels = [self.seed_source] + [c.source for c in self.journal.candidates()
                                                if c.kind in ("child", "repair") and c.ok]
                await self.scientist.preflight(kernels)
            # said once: on, or why it is off
            self.profile, said = profiling.resolve_profiler(
                self.profile, judged_here=not getattr(self.executor, "judges_elsewhere", False))
            self.judging.profiles.profile = self.profile
            if said:
                self.journal.emit(CandidateProfiled(None, self.iterations_done(), "ncu", None, said))
            try:
                await self._roots()
            except EvaluationsSpent as exc:
                ended = str(exc)
            else:
                self._say_where_the_seed_was_timed()
                # Composition also follows every verdict (kscience.run.judging); here it judges a composite a
                # stopped run left pending, and composes what the roots of a resumed run make possible.
                await self.judging.composer.maybe_compose(self.iterations_done())
                self.population.observe()
                ended = await self.scheduler.schedule(target)
            await self._baselines_judged()  # a run is done once every baseline has its verdict
            if ended is not None:
                self.journal.stage("done", self.iterations_done(), ended)
            # figures from several hosts: end on a settled best (through a batching queue, optional work still
            # held is skipped rather than sent alone)
            await self.judging.pairing.finish(confirm.FINAL_ROUNDS)
        except asyncio.CancelledError:  # Ctrl-C: a baseline started keeps its verdict, the others stay pending
            for task in self._worked_beside():
                task.cancel()
            await asyncio.gather(*self._worked_beside(), return_exceptions=True)
            raise
        except BaseException:  # a stop or a failure: baselines in flight end as evaluations in flight do
            await asyncio.gather(*self._worked_beside(), return_exceptions=True)
            raise
        finally:
            self.judging.use.save()  # this session's wall time and every slot's busy time

    def _say_where_the_seed_was_timed(self) -> None:
        """A resumed session compares its kernels with a seed an earlier session timed, under another moment's
        load: said once, with the command that times them side by side."""
        seed = first_of_kind(self.journal.candidates(), "seed")
        if self.judging.seed_timed_earlier(seed):
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(seed.evaluated))
            self.journal.emit(Notice(
                f"{EARLIER_SEED_MARK} vs seed: the seed was timed by an earlier session of this run ({when}), under "
                f"that moment's machine load; `kscience retime {self.run_id} --db {self.store.path}` judges the seed "
                f"and the best kernels again side by side", self.iterations_done()))

    def _worked_beside(self) -> list[asyncio.Task]:
        """The baselines, the seed's profile and optional work sent with an evaluation, which the lines do not
        wait for."""
        return [*self._beside, *self.judging.profiles.beside, *self.judging.held.started]

    async def _baselines_judged(self) -> None:
        """Wait for every baseline (and the seed's profile) the lines worked beside; raise the first
        failure among them."""
        for outcome in await asyncio.gather(*self._worked_beside(), return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    def iterations_done(self) -> int:
        return iterations_done(self.journal.plans())

    # --- seed and baselines ------------------------------------------------------------------
    async def _roots(self) -> None:
        """The seed (repaired if it fails) is the root of the population; the reference, the problem's
        vendor-library path and the reference's torch.compile are baselines. The lines start once the seed
        passes: the baselines are judged beside them (`_beside`), so a prompt written before a baseline's
        verdict lacks it and later ones have it. A baseline that fails keeps its status and the run goes on."""
        candidates = self.journal.candidates()
        chain = judge_again([c for c in candidates if c.iteration == 0 and c.kind in ("seed", "repair")],
                            self.judging.step_limit_for, self.journal)
        if not chain:
            self.journal.stage("seed", 0)
            chain = [self._add(kind="seed", source=self.seed_source, hypothesis="seed kernel", iteration=0)]
        # The seed and the baselines that need nothing from it are asked for together (one batch of a queue
        # executor's requests, one round of a cluster's), not one after another.
        cheap = [("eager", self.reference_source, "PyTorch eager")]
        if self.vendor_source:  # where the library cannot run, it is stored with the reason
            cheap.append(("vendor", self.vendor_source, vendor_title(self.problem)))
        alone = vendor_alone_source(self.problem)
        if alone:  # the same call on inputs already in its layout: how much of its time is the GEMM
            cheap.append(("vendor_alone", alone, vendor_title(self.problem, self.problem.vendor_alone.name)))
        # The seed's request goes out first (its coroutine runs at once), the baselines' as it awaits its verdict.
        # They take no slot, so an executor runs them in the order asked: all before any child exists, and a
        # child, written two model answers after the seed's verdict, waits only for what is left of them (the
        # eager and vendor baselines take 1-3 s each on an H100). Where the seed is profiled on this machine's
        # slots, its profile (which may not share the GPU with a baseline's timing) goes first and the baselines
        # after it. The lines wait for neither: on an H100 they waited 13 s of baselines and then 12.5 s of
        # profile before the first design. The first designer works from the seed's evaluation (compile facts,
        # time per launched kernel); every design asked once the profile is stored shows it. A queue or a
        # cluster gets the baselines in one batch with the seed.
        libraries = [lib for lib in self.problem.libraries if not missing_line(lib)
                     or self._library_row(candidates, lib) is not None]
        missing = [lib for lib in self.problem.libraries if lib not in libraries]
        if missing:  # in one line, not one per library
            self.journal.emit(Notice(skipped_line(missing), missing=sorted({lib.distribution for lib in missing})))
        baselines = [*(partial(self._baseline, candidates, kind, source, title, {}) for kind, source, title in cheap),
                     *(partial(self._library_baseline, candidates, lib) for lib in libraries)]
        profiled_here = bool(self.judging.profiles.profile) and not getattr(self.executor, "judges_elsewhere", False)
        if not profiled_here:
            self._beside = [self._judged_beside(judged()) for judged in baselines]
        # A chain judged again from a timed-out member may hold a correct kernel before the repairs made after it.
        final = next((c for c in chain if c.ok), None) or await self.scheduler.line(0).settle(
            chain, iteration=0, plan_id=None, title="seed kernel", profile_beside=True)
        if profiled_here:
            self._beside = [self._judged_beside(judged()) for judged in baselines]
        if not final.ok:
            raise seed_failure(chain, self.journal, self.problem, self.repairs,
                               getattr(self.scientist, "model_name", "offline"))
        if compiled_baseline_wanted(self.compiled_baseline, final):  # on the seed's device; Judging says when
            self._beside.append(self._judged_beside(self._baseline(
                candidates, "compiled", self.compiled_source, "torch.compile of PyTorch eager", final.device)))

    def _judged_beside(self, baseline) -> asyncio.Task:
        """A baseline judged while the lines work; every prompt after its verdict names it."""
        async def judged() -> None:
            await baseline
            self.population.observe()
        return asyncio.create_task(judged())

    async def _baseline(self, candidates: list[Candidate], kind: str, source: str, hypothesis: str,
                        device: DeviceRecord) -> None:
        """A baseline a user would otherwise pick, judged once per run (also after a resume), not
        counted against --evaluations; torch.compile's is taken from an earlier run where one timed it."""
        row = first_of_kind(candidates, kind)
        if row is None:
            self.journal.stage(kind, 0)
            row = self._add(kind=kind, source=source, hypothesis=hypothesis, iteration=0)
        if row.status != PENDING:
            return
        earlier = self._timed_before(kind, source, device) if kind in REUSED_BASELINES else None
        if earlier is not None:  # a verdict stored elsewhere: read into a Verdict here, where it comes in
            result, notes = result_from_stored(earlier.result)
            self.judging.record_verdict(row, Verdict(replace(result, message=earlier.message(result.message)), notes))
            return
        judged = await self.judging.evaluate(row, counted=False)
        if kind in REUSED_BASELINES:  # for runs of other databases, and `kscience eval`
            baseline_cache.keep(self.problem, kind, source, judged.result, judged.stored_result,
                                f"run {self.run_id} ({judged.id}) of {self.store.path}")

    def _library_row(self, candidates: list[Candidate], lib) -> Candidate | None:
        return next((c for c in candidates if c.kind == "library" and self.problem.library_named(c.hypothesis)
                     is lib), None)

    async def _library_baseline(self, candidates: list[Candidate], lib) -> None:
        """A library a user would install instead, timed as a baseline (`_roots` has said, in one line for all,
        which are skipped because their packages are not installed here); where it cannot run on the device, its
        row keeps the reason, as the vendor path's does."""
        row = self._library_row(candidates, lib)
        if row is None:
            self.journal.stage("library", 0, lib.name)
            row = self._add(kind="library", source=library_candidate(lib), hypothesis=library_title(self.problem, lib),
                            iteration=0)
        if row.status == PENDING:
            await self.judging.evaluate(row, counted=False)

    def _timed_before(self, kind: str, source: str, device: DeviceRecord) -> baseline_cache.Kept | None:
        """The newest passing verdict this baseline had on a GPU of the same name with the same torch, Triton
        and CUDA/ROCm versions: from another run of this store that judged this very source, else from the
        cache beside every database (kscience.run.baseline_cache); None where there is none."""
        if device.interpreted is not False:
            return None
        for c in self.store.judged_elsewhere(self.run_id, kind, source):
            if c.ok and c.device.name == device.name and c.device.versions == device.versions:
                return baseline_cache.Kept(c.stored_result, f"run {c.run_id} ({c.id})", c.evaluated)
        return baseline_cache.recall(self.problem, kind, source, device)

    def _add(self, **fields) -> Candidate:
        cand = self.journal.add_candidate(**fields)
        self.journal.emit(CandidateWritten(candidate_id=cand.id, parent_id=cand.parent_id, kind=cand.kind,
                                           iteration=cand.iteration, plan_title=cand.hypothesis, status=cand.status))
        return cand
