"""The controller: it keeps up to `lines` lines of work going at once (see kscience.run.line).

A line is one iteration: select a base, design, then write -> evaluate -> repair -> finding for
each chosen plan. With one line, iterations follow one another as design rounds always did; with
K lines, K iterations run at once on their own clocks, sharing the population, every finding
recorded so far and the evaluation slots (kscience.run.judging), so the evaluator keeps working while
the model thinks. Lines waiting for work share one designer answer (kscience.run.sharing); a line
whose candidates are all written counts as free only while the evaluator is faster than the model (both
measured by this run), so its next iteration is designed while they are judged; otherwise its next design
waits for their verdicts and learns from them. `--iterations N` counts designs started in total; the run
also ends at its `--evaluations` budget, at `--stop-at-sol`, when nothing is left to try, or on a stop.

Every step reads what it needs from the store and commits what it produced before the next step
starts, so the controller can be dropped at any point (stop, failure, `kill -9`) and a new one
continues where it left off: a candidate still `pending` is evaluated, a failed one is repaired if
it has attempts left, and each iteration with a plan but no finding is finished as a line of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from functools import partial

from kscience.run import baseline_cache, confirm, profiling
from kscience.run.baselines import (REUSED_BASELINES, compiled_baseline_wanted, compiled_source, library_candidate,
                                    library_title, reference_source, vendor_alone_source, vendor_source,
                                    vendor_title)
from kscience.evaluate.executors.base import Executor
from kscience.run.budget import EvaluationBudget, EvaluationsSpent
from kscience.run.config import RunConfig
from kscience.run.events import CandidateProfiled, CandidateWritten, EventBus, Notice
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.run.judging import Judging
from kscience.run.line import Line, NothingLeft, RunError
from kscience.run.log import EARLIER_SEED_MARK
from kscience.run.population import Population
from kscience.run.seed_chain import judge_again, seed_failure
from kscience.run.sharing import Sharing
from kscience.run.slots import Slots
from kscience.problems import Problem
from kscience.problems.libraries import missing_line, skipped_line
from kscience.record.candidate import Candidate
from kscience.record.snapshot import best_candidate, first_of_kind, iterations_done
from kscience.record.rows import PlanRow
from kscience.record.store import PENDING, Store

__all__ = ["Controller", "RunError", "Stopped"]

AHEAD_PER_LINE = 2  # iterations one line may have going: one being judged while the next is designed


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
        self._last_claimed = 0  # the newest iteration number a line was given
        # Set by each verdict recorded (kscience.run.judging) and each line whose candidates are all
        # written: either may let the controller start a line.
        self.changed = asyncio.Event()
        self.sharing = Sharing()  # pooled plans and designs under way (kscience.run.sharing)
        self._seeking: set[asyncio.Task] = set()  # line tasks that have no plans stored yet
        self._written: set[asyncio.Task] = set()  # line tasks whose candidates are all written
        self._ahead: set[asyncio.Task] = set()  # of those, the ones whose next iteration may be designed now
        self._line_of: dict[asyncio.Task, Line] = {}  # each line task's Line (its candidates awaiting a verdict)
        self.model_s: float | None = None  # how long a designer answer takes, smoothed
        self._beside: list[asyncio.Task] = []  # the baselines, judged while the lines work (see _roots)

    # --- the run -----------------------------------------------------------------------------
    async def run_iterations(self, target: int) -> None:
        """Bring the run to `target` iterations (designs), finishing any interrupted work first."""
        self.judging = Judging(self.executor, journal=self.journal, stopping=self.stopping, budget=self.budget,
                               problem=self.problem, changed=self.changed, eval_timeout_s=self.eval_timeout_s,
                               time_limit_s=self.time_limit_s, build_limit_s=self.build_limit_s, slots=self.slots,
                               precision=self.precision)
        self.population.rules_of = self.judging.rules
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
            self.judging.profile = self.profile
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
                ended = await self._schedule(target)
            await self._baselines_judged()  # a run is done once every baseline has its verdict
            if ended is not None:
                self.journal.stage("done", self.iterations_done(), ended)
            # figures from several hosts: end on a settled best (through a batching queue, optional work still
            # held is skipped rather than sent alone)
            await self.judging.finish(confirm.FINAL_ROUNDS)
        except asyncio.CancelledError:  # Ctrl-C: a baseline started keeps its verdict, the others stay pending
            for task in self._worked_beside():
                task.cancel()
            await asyncio.gather(*self._worked_beside(), return_exceptions=True)
            raise
        except BaseException:  # a stop or a failure: baselines in flight end as evaluations in flight do
            await asyncio.gather(*self._worked_beside(), return_exceptions=True)
            raise
        finally:
            self.judging.save()  # this session's wall time and every slot's busy time

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
        return [*self._beside, *self.judging.profiles_beside, *self.judging.held.started]

    async def _baselines_judged(self) -> None:
        """Wait for every baseline (and the seed's profile) the lines worked beside; raise the first
        failure among them."""
        for outcome in await asyncio.gather(*self._worked_beside(), return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def _schedule(self, target: int) -> str | None:
        """Keep up to `self.lines` lines going: first every interrupted iteration, then new ones while
        the budgets allow. Ends when no line is left, returning why the run is done (None: its iterations
        are); raises the first failure once all have committed."""
        tasks: dict[asyncio.Task, tuple[int, int]] = {}  # line task -> (its line number, its iteration)
        for rows in self._open_iterations():
            number = self._free_line(tasks)
            tasks[asyncio.create_task(self._resumed_line(number, rows))] = (number, rows[0].iteration)
        designing = self._seeking
        failure: BaseException | None = None
        stopped: Stopped | None = None
        spent: EvaluationsSpent | None = None
        exhausted_at: int | None = None  # population size when a line found nothing left to try
        ended: str | None = None
        woken: asyncio.Task | None = None
        try:
            while True:
                while (failure is None and stopped is None and spent is None and ended is None
                       and not self.stopping.requested()
                       and self._occupied(tasks) < self.lines and len(tasks) < AHEAD_PER_LINE * self.lines
                       and self.iterations_done() + len(designing) < target
                       and (exhausted_at is None or self._population_size() > exhausted_at)):
                    ended = profiling.stop_message(self.problem, best_candidate(self.journal.candidates()),
                                                   self.stop_at_sol)
                    if ended is not None:
                        break
                    try:
                        self.budget.check()
                    except EvaluationsSpent as exc:
                        spent = exc
                        break
                    number, iteration = self._free_line(tasks), self._next_iteration()
                    task = asyncio.create_task(self._new_line(number, iteration, designing))
                    designing.add(task)
                    tasks[task] = (number, iteration)
                if not tasks:
                    break
                # Woken when a line ends, when a verdict is recorded (a line that found nothing left to try
                # may find something on the new member) and when a line's candidates are all written.
                self.changed.clear()
                woken = asyncio.create_task(self.changed.wait())
                done, _ = await asyncio.wait([*tasks, woken], return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                for task in done & tasks.keys():
                    number, iteration = tasks.pop(task)
                    designing.discard(task)
                    self._written.discard(task)
                    self._ahead.discard(task)
                    self._line_of.pop(task, None)
                    # The dashboard shows each line's stage: this one has none now, unless the line
                    # already works on its next iteration.
                    if self.lines > 1 and number not in {n for n, _ in tasks.values()}:
                        self.journal.stage("line ended", iteration, "", number)
                    exc = task.exception()
                    if isinstance(exc, NothingLeft):
                        exhausted_at, ended = self._population_size(), str(exc)
                    elif isinstance(exc, EvaluationsSpent):
                        spent = spent or exc
                    elif isinstance(exc, Stopped):
                        stopped = stopped or exc
                    elif exc is not None:
                        failure = failure or exc
                        self.stopping.halt()
                if exhausted_at is not None and self._population_size() > exhausted_at and failure is None:
                    ended = None  # a line's new member may leave something to try: try again
        except asyncio.CancelledError:  # Ctrl-C: every line records what it can, then the stop goes through
            for task in [*tasks, *([woken] if woken else [])]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if failure is not None:
            raise failure
        if stopped is not None or self.stopping.requested():
            raise stopped or Stopped("stopped on request")
        return str(spent) if spent is not None else ended

    def _line(self, number: int) -> Line:
        return Line(number, journal=self.journal, stopping=self.stopping, judging=self.judging, budget=self.budget,
                    population=self.population, scientist=self.scientist, sharing=self.sharing,
                    problem=self.problem, repairs=self.repairs, lines_waiting=self.lines_waiting,
                    note_model_time=self.note_model_time, several=self.lines > 1)

    async def _new_line(self, number: int, iteration: int, designing: set) -> None:
        line, me = self._line(number), asyncio.current_task()
        self._line_of[me] = line
        rows = await line.find_work(iteration)
        designing.discard(me)  # stored: counted by iterations_done from now on
        await line.experiments(rows, lambda: self._all_written(me))

    async def _resumed_line(self, number: int, rows: list[dict]) -> None:
        line, me = self._line(number), asyncio.current_task()
        self._line_of[me] = line
        await line.experiments(rows, lambda: self._all_written(me))

    def _all_written(self, task: asyncio.Task) -> None:
        self._written.add(task)
        self.changed.set()

    def _design_ahead(self) -> bool:
        """Whether a line whose candidates are all written may start its next design while they are judged: only
        when the evaluator is faster than the model, as this run measured both, so that the verdicts asked for
        now are back before one designer answer (and reach the design after it). Otherwise, and until both are
        measured, the line waits for its verdicts and its next design learns from them; other lines, where the
        run has more than one, keep the slots busy meanwhile."""
        verdicts_in = self.judging.verdicts_in_s()
        return self.model_s is not None and verdicts_in is not None and verdicts_in < self.model_s

    def _occupied(self, tasks: dict) -> int:
        """Lines in use. A line whose candidates are all written becomes free, for good, once designing ahead pays
        while some of them still wait for a verdict; one whose verdicts are all in finishes its findings first,
        which its next design then reads."""
        if any(task in self._written and task not in self._ahead for task in tasks) and self._design_ahead():
            self._ahead |= {task for task in tasks if task in self._written and self._line_of[task].judged_now}
        return sum(task not in self._ahead for task in tasks)

    def lines_waiting(self) -> int:
        """Line tasks that have no plans yet: what one designer answer should supply."""
        return len(self._seeking)

    def note_model_time(self, seconds: float) -> None:
        self.model_s = seconds if self.model_s is None else 0.5 * (self.model_s + seconds)

    def _open_iterations(self) -> list[list[PlanRow]]:
        """The chosen plans without a finding, one list per iteration: each is resumed as a line."""
        found = {f.plan_id for f in self.store.findings(self.run_id)}
        by_iteration: dict[int, list[PlanRow]] = {}
        for p in self.store.plans(self.run_id):
            if p.chosen and p.id not in found:
                by_iteration.setdefault(p.iteration, []).append(p)
        return [by_iteration[i] for i in sorted(by_iteration)]

    def _free_line(self, tasks: dict) -> int:
        """The lowest line number not in use, so the dashboard's lines keep their numbers; a line designing
        ahead leaves its number to its next iteration."""
        used = {number for task, (number, _) in tasks.items() if task not in self._ahead}
        return next(n for n in range(1, len(used) + 2) if n not in used)

    def _next_iteration(self) -> int:
        """A new line's iteration number: after every stored one and every one claimed by a line."""
        stored = max((p.iteration for p in self.store.plans(self.run_id)), default=0)
        self._last_claimed = max(self._last_claimed, stored) + 1
        return self._last_claimed

    def _population_size(self) -> int:
        return sum(c.result is not None for c in self.journal.candidates())

    def iterations_done(self) -> int:
        return iterations_done(self.store.plans(self.run_id))

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
        profiled_here = bool(self.judging.profile) and not getattr(self.executor, "judges_elsewhere", False)
        if not profiled_here:
            self._beside = [self._judged_beside(judged()) for judged in baselines]
        # A chain judged again from a timed-out member may hold a correct kernel before the repairs made after it.
        final = next((c for c in chain if c.ok), None) or await self._line(0).settle(
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
                        device: dict) -> None:
        """A baseline a user would otherwise pick, judged once per run (also after a resume), not
        counted against --evaluations; torch.compile's is taken from an earlier run where one timed it."""
        row = first_of_kind(candidates, kind)
        if row is None:
            self.journal.stage(kind, 0)
            row = self._add(kind=kind, source=source, hypothesis=hypothesis, iteration=0)
        if row.status != PENDING:
            return
        earlier = self._timed_before(kind, source, device) if kind in REUSED_BASELINES else None
        if earlier is not None:
            result, where, when = earlier
            self.judging.record_verdict(row, dict(result, message=baseline_cache.reused_message(result, where, when)))
            return
        judged = await self.judging.evaluate(row, counted=False)
        if kind in REUSED_BASELINES:  # for runs of other databases, and `kscience eval`
            baseline_cache.keep(self.problem, kind, source, judged.stored_result,
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

    def _timed_before(self, kind: str, source: str, device: dict) -> tuple[dict, str, float] | None:
        """(verdict, who timed it, when) of the newest passing verdict this baseline had on a GPU of the same
        name with the same torch, Triton and CUDA/ROCm versions: from another run of this store that judged
        this very source, else from the cache beside every database (kscience.run.baseline_cache); None
        where there is none."""
        if device.get("interpreted") is not False:
            return None
        for c in self.store.judged_elsewhere(self.run_id, kind, source):
            theirs = c.device
            if (c.ok and theirs.get("name") == device.get("name")
                    and theirs.get("versions") == device.get("versions")):
                return c.stored_result, f"run {c.run_id} ({c.id})", c.evaluated
        kept = baseline_cache.recall(self.problem, kind, source, device)
        return (kept["result"], kept["where"], kept["when"]) if kept else None

    def _add(self, **fields) -> Candidate:
        cand = self.store.add_candidate(self.run_id, **fields)
        self.journal.emit(CandidateWritten(candidate_id=cand.id, parent_id=cand.parent_id, kind=cand.kind,
                                           iteration=cand.iteration, plan_title=cand.hypothesis, status=cand.status))
        return cand
