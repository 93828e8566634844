"""The controller: it keeps up to `lines` lines of work going at once (see kscience.run.line).

A line is one iteration: select a base, design, then write -> evaluate -> repair -> finding for
each chosen plan. With one line, iterations follow one another as design rounds always did; with
K lines, K iterations run at once on their own clocks, sharing the population, every finding
recorded so far and the evaluation slots (kscience.run.judging), so the evaluator keeps working while
the model thinks. Lines waiting for work share one designer answer (kscience.run.sharing); a line
whose candidates are all written counts as free while the evaluator's queue would otherwise run dry
before a new design and its writes come back, so its next iteration is designed while they are judged. `--iterations N` counts designs started in total; the run also ends at its
`--evaluations` budget, at `--stop-at-sol`, when nothing is left to try, or on a stop.

Every step reads what it needs from the store and commits what it produced before the next step
starts, so the controller can be dropped at any point (stop, failure, `kill -9`) and a new one
continues where it left off: a candidate still `pending` is evaluated, a failed one is repaired if
it has attempts left, and each iteration with a plan but no finding is finished as a line of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time

from kscience.run import confirm, profiling
from kscience.run.baselines import (REUSED_BASELINES, compiled_baseline_wanted, library_candidate, library_title,
                                    vendor_alone_source, vendor_source, vendor_title)
from kscience.evaluate import result as R
from kscience.evaluate.executors.base import Executor
from kscience.run.events import CandidateProfiled, CandidateWritten, Event, EventBus, StageChanged
from kscience.run.judging import Judging
from kscience.run.line import EvaluationsSpent, Line, NothingLeft, RunError, Stopped
from kscience.run.sharing import Sharing
from kscience.problems import Problem, shape_label
from kscience.problems.libraries import missing_line
from kscience.scientist import compose
from kscience.scientist.briefing import bench_from_results, coverage, floor_times
from kscience.scientist.hardware import describe, run_target
from kscience.scientist.roles import CandidateView
from kscience.record.snapshot import best_candidate, first_of_kind, iterations_done
from kscience.record.store import BASELINE_KINDS, PENDING, Store

__all__ = ["Controller", "RunError", "Stopped"]

AHEAD_PER_LINE = 2  # iterations one line may have going: one being judged while the next is designed
MODEL_CALLS_TO_A_CHILD = 2  # a design, then its writer: answers between a line's start and its first child


class Controller:
    def __init__(self, *, store: Store, run_id: str, problem: Problem, scientist, executor: Executor,
                 bus: EventBus, repairs: int, seed_source: str, reference_source: str, compiled_source: str,
                 compiled_baseline: bool | None, stop: threading.Event, profile: str | None = None,
                 stop_at_sol: float | None = None, lines: int | None = None, max_evaluations: int | None = None,
                 eval_timeout_s: float | None = None, time_limit_s: float | None = None):
        self.store, self.run_id, self.problem = store, run_id, problem
        self.scientist, self.executor, self.bus = scientist, executor, bus
        self.repairs = repairs
        self.seed_source, self.reference_source = seed_source, reference_source
        self.compiled_source, self.compiled_baseline = compiled_source, compiled_baseline
        self.vendor_source = vendor_source(problem)
        self._stop = stop  # set by the user (Run.stop)
        self._halted = False  # set when one experiment failed, so every line stops at its next step
        self.lines = max(1, lines or executor.capacity)  # default: one line per evaluation slot
        self.max_evaluations = max_evaluations
        self.eval_timeout_s, self.time_limit_s = eval_timeout_s, time_limit_s  # --eval-timeout, --time-limit
        self.profile, self.stop_at_sol = profile, stop_at_sol  # --profile auto/ncu/none, --stop-at-sol F
        self.judging: Judging | None = None  # made on the run's event loop (its slots are an asyncio.Queue)
        self._last_claimed = 0  # the newest iteration number a line was given
        # Set by each verdict recorded (kscience.run.judging) and each line whose candidates are all
        # written: either may let the controller start a line.
        self.changed = asyncio.Event()
        self.sharing = Sharing()  # pooled plans and designs under way (kscience.run.sharing)
        self._seeking: set[asyncio.Task] = set()  # line tasks that have no plans stored yet
        self._written: set[asyncio.Task] = set()  # line tasks whose candidates are all written
        self.model_s: float | None = None  # how long a designer answer takes, smoothed

    # --- the run -----------------------------------------------------------------------------
    async def run_iterations(self, target: int) -> None:
        """Bring the run to `target` iterations (designs), finishing any interrupted work first."""
        self.judging = Judging(self, self.executor, self.max_evaluations)
        try:
            if self.iterations_done() < target:
                # Fail fast: a dead endpoint, or a scientist that cannot work on this problem, is found
                # before minutes of seed and baseline timing.
                kernels = [self.seed_source] + [c["source"] for c in self.store.candidates(self.run_id)
                                                if c["kind"] in ("child", "repair") and c["status"] == R.OK]
                await self.scientist.preflight(kernels)
            # said once: on, or why it is off
            self.profile, said = profiling.resolve_profiler(
                self.profile, judged_here=not getattr(self.executor, "judges_elsewhere", False))
            if said:
                self.emit(CandidateProfiled(None, self.iterations_done(), "ncu", None, said))
            try:
                await self._roots()
            except EvaluationsSpent as exc:
                self.stage("done", 0, str(exc))
                return
            # Composition also follows every verdict (kscience.run.judging); here it judges a composite a
            # stopped run left pending, and composes what the roots of a resumed run make possible.
            await self.judging.maybe_compose(self.iterations_done())
            self.observe()
            await self._schedule(target)
            await self.judging.settle(confirm.FINAL_ROUNDS)  # figures from several hosts: end on a settled best
        finally:
            self.judging.save()  # this session's wall time and every slot's busy time

    async def _schedule(self, target: int) -> None:
        """Keep up to `self.lines` lines going: first every interrupted iteration, then new ones while
        the budgets allow. Ends when no line is left; raises the first failure once all have committed."""
        tasks: dict[asyncio.Task, tuple[int, int]] = {}  # line task -> (its line number, its iteration)
        for rows in self._open_iterations():
            number = self._free_line(tasks)
            tasks[asyncio.create_task(self._resumed_line(number, rows))] = (number, rows[0]["iteration"])
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
                       and not self.stop_requested()
                       and self._occupied(tasks) < self.lines and len(tasks) < AHEAD_PER_LINE * self.lines
                       and self.iterations_done() + len(designing) < target
                       and (exhausted_at is None or self._population_size() > exhausted_at)):
                    ended = profiling.stop_message(self.problem, best_candidate(self.store.candidates(self.run_id)),
                                                   self.stop_at_sol)
                    if ended is not None:
                        break
                    try:
                        self.judging.check_budget()
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
                    # The dashboard shows each line's stage: this one has none now, unless the line
                    # already works on its next iteration.
                    if self.lines > 1 and number not in {n for n, _ in tasks.values()}:
                        self.stage("line ended", iteration, "", number)
                    exc = task.exception()
                    if isinstance(exc, NothingLeft):
                        exhausted_at, ended = self._population_size(), str(exc)
                    elif isinstance(exc, EvaluationsSpent):
                        spent = spent or exc
                    elif isinstance(exc, Stopped):
                        stopped = stopped or exc
                    elif exc is not None:
                        failure = failure or exc
                        self.halt()
                if exhausted_at is not None and self._population_size() > exhausted_at and failure is None:
                    ended = None  # a line's new member may leave something to try: try again
        except asyncio.CancelledError:  # Ctrl-C: every line records what it can, then the stop goes through
            for task in [*tasks, *([woken] if woken else [])]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if failure is not None:
            raise failure
        if stopped is not None or self.stop_requested():
            raise stopped or Stopped("stopped on request")
        if spent is not None:
            self.stage("done", self.iterations_done(), str(spent))
        elif ended is not None:
            self.stage("done", self.iterations_done(), ended)

    async def _new_line(self, number: int, iteration: int, designing: set) -> None:
        line, me = Line(self, number), asyncio.current_task()
        rows = await line.find_work(iteration)
        designing.discard(me)  # stored: counted by iterations_done from now on
        await line.experiments(rows, lambda: self._all_written(me))

    async def _resumed_line(self, number: int, rows: list[dict]) -> None:
        me = asyncio.current_task()
        await Line(self, number).experiments(rows, lambda: self._all_written(me))

    def _all_written(self, task: asyncio.Task) -> None:
        self._written.add(task)
        self.changed.set()

    def _design_ahead(self) -> bool:
        """Whether a line whose candidates are all written may start its next design while they are judged:
        when the evaluator's queued work would run out before a design and its writes (two model answers)
        could add to it, and while either side's time is not yet known."""
        backlog = self.judging.backlog_s()
        return self.model_s is None or backlog is None or backlog <= MODEL_CALLS_TO_A_CHILD * self.model_s

    def _occupied(self, tasks: dict) -> int:
        """Lines in use: a line whose candidates are all written counts as free while designing ahead pays."""
        ahead = self._design_ahead()
        return sum(not (ahead and task in self._written) for task in tasks)

    def lines_waiting(self) -> int:
        """Line tasks that have no plans yet: what one designer answer should supply."""
        return len(self._seeking)

    def note_model_time(self, seconds: float) -> None:
        self.model_s = seconds if self.model_s is None else 0.5 * (self.model_s + seconds)

    def _open_iterations(self) -> list[list[dict]]:
        """The chosen plans without a finding, one list per iteration: each is resumed as a line."""
        found = {f["plan_id"] for f in self.store.findings(self.run_id)}
        by_iteration: dict[int, list[dict]] = {}
        for p in self.store.plans(self.run_id):
            if p["chosen"] and p["id"] not in found:
                by_iteration.setdefault(p["iteration"], []).append(p)
        return [by_iteration[i] for i in sorted(by_iteration)]

    def _free_line(self, tasks: dict) -> int:
        """The lowest line number not in use, so the dashboard's lines keep their numbers; a line designing
        ahead leaves its number to its next iteration."""
        ahead = self._design_ahead()
        used = {number for task, (number, _) in tasks.items() if not (ahead and task in self._written)}
        return next(n for n in range(1, len(used) + 2) if n not in used)

    def _next_iteration(self) -> int:
        """A new line's iteration number: after every stored one and every one claimed by a line."""
        stored = max((p["iteration"] for p in self.store.plans(self.run_id)), default=0)
        self._last_claimed = max(self._last_claimed, stored) + 1
        return self._last_claimed

    def _population_size(self) -> int:
        return sum(c["result"] is not None for c in self.store.candidates(self.run_id))

    def iterations_done(self) -> int:
        return iterations_done(self.store.plans(self.run_id))

    def plans_on(self, base_id: str) -> tuple[list[str], list[str]]:
        """Titles of the experiments chosen on `base_id`: (carried out, under way in some line)."""
        found = {f["plan_id"] for f in self.store.findings(self.run_id)}
        chosen = [p for p in self.store.plans(self.run_id) if p["chosen"] and p["base_id"] == base_id]
        return [p["title"] for p in chosen if p["id"] in found], [p["title"] for p in chosen if p["id"] not in found]

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def halt(self) -> None:
        """One experiment failed: every line stops after its current step."""
        self._halted = True

    def check_stop(self) -> None:
        if self._stop.is_set() or self._halted:
            raise Stopped("stopped on request")

    def emit(self, event: Event) -> None:
        self.bus.publish(event)

    def stage(self, stage: str, iteration: int, detail: str = "", line: int = 0) -> None:
        self.emit(StageChanged(stage=stage, iteration=iteration, detail=detail, line=line))

    # --- seed and baselines ------------------------------------------------------------------
    async def _roots(self) -> None:
        """The seed (repaired if it fails) is the root of the population; the reference, the problem's
        vendor-library path and the reference's torch.compile are baselines. A baseline that fails keeps
        its status and the run goes on."""
        candidates = self.store.candidates(self.run_id)
        chain = [c for c in candidates if c["iteration"] == 0 and c["kind"] in ("seed", "repair")]
        if not chain:
            self.stage("seed", 0)
            chain = [self._add(kind="seed", source=self.seed_source, hypothesis="seed kernel", iteration=0)]
        # The seed and the baselines that need nothing from it are asked for together (one batch of a queue
        # executor's requests, one round of a cluster's), not one after another.
        cheap = [("reference", self.reference_source, "PyTorch eager")]
        if self.vendor_source:  # where the library cannot run, it is stored with the reason
            cheap.append(("vendor", self.vendor_source, vendor_title(self.problem)))
        alone = vendor_alone_source(self.problem)
        if alone:  # the same call on inputs already in its layout: how much of its time is the GEMM
            cheap.append(("vendor_alone", alone, vendor_title(self.problem, self.problem.vendor_alone.name)))
        settled = Line(self, 0).settle(chain, iteration=0, plan_id=None, title="seed kernel")
        final, *_ = await asyncio.gather(settled, *(self._baseline(candidates, kind, source, title, {})
                                                    for kind, source, title in cheap),
                                         *(self._library_baseline(candidates, lib) for lib in self.problem.libraries))
        if final["status"] != R.OK:
            raise RunError(f"the seed kernel does not pass ({chain[0]['status']}: {chain[0]['message']}) "
                           f"and {self.repairs} repair attempt(s) did not fix it")
        device = (final.get("result") or {}).get("device") or {}
        if compiled_baseline_wanted(self.compiled_baseline, final):
            await self._baseline(candidates, "compiled", self.compiled_source, "torch.compile of PyTorch eager",
                                 device)

    async def _baseline(self, candidates: list[dict], kind: str, source: str, hypothesis: str,
                        device: dict) -> None:
        """A baseline a user would otherwise pick, judged once per run (also after a resume), not
        counted against --evaluations; torch.compile's is taken from an earlier run where one timed it."""
        row = first_of_kind(candidates, kind)
        if row is None:
            self.stage(kind, 0)
            row = self._add(kind=kind, source=source, hypothesis=hypothesis, iteration=0)
        if row["status"] != PENDING:
            return
        earlier = self._timed_before(kind, source, device) if kind in REUSED_BASELINES else None
        if earlier is None:
            await self.judging.evaluate(row, counted=False)
            return
        when = time.strftime("%Y-%m-%d", time.localtime(earlier["evaluated"]))
        self.judging.record_verdict(row, dict(earlier["result"], message=(
            f"timed by run {earlier['run_id']} ({earlier['id']}, {when}) on this device with these versions, "
            f"reused: {earlier['result']['message']}")))

    async def _library_baseline(self, candidates: list[dict], lib) -> None:
        """A library a user would install instead, timed as a baseline. Where its package is not installed here
        the run says so in one line and goes on without it; where it cannot run on the device, its row keeps the
        reason, as the vendor path's does."""
        row = next((c for c in candidates if c["kind"] == "library" and self.problem.library_named(c["hypothesis"])
                    is lib), None)
        if row is None:
            missing = missing_line(lib)
            if missing:
                self.stage("library missing", 0, missing)
                return
            self.stage("library", 0, lib.name)
            row = self._add(kind="library", source=library_candidate(lib), hypothesis=library_title(self.problem, lib),
                            iteration=0)
        if row["status"] == PENDING:
            await self.judging.evaluate(row, counted=False)

    def _timed_before(self, kind: str, source: str, device: dict) -> dict | None:
        """The newest passing verdict another run of this store gave this very baseline source on a GPU of
        the same name with the same torch, Triton and CUDA/ROCm versions; None where there is none."""
        if device.get("interpreted") is not False:
            return None
        for c in self.store.judged_elsewhere(self.run_id, kind, source):
            theirs = c["result"].get("device") or {}
            if (c["status"] == R.OK and theirs.get("name") == device.get("name")
                    and theirs.get("versions") == device.get("versions")):
                return c
        return None

    def _add(self, **fields) -> dict:
        cand = self.store.add_candidate(self.run_id, **fields)
        self.emit(CandidateWritten(candidate_id=cand["id"], parent_id=cand["parent_id"], kind=cand["kind"],
                                   iteration=cand["iteration"], plan_title=cand["hypothesis"], status=cand["status"]))
        return cand

    # --- what the scientist sees -------------------------------------------------------------
    def views(self) -> dict[str, CandidateView]:
        """Every evaluated candidate of the population (the baselines are not members)."""
        cands = [c for c in self.store.candidates(self.run_id)
                 if c["kind"] not in BASELINE_KINDS and c["result"] is not None]
        by_id = {c["id"]: c for c in cands}
        profiles = {p["candidate_id"]: p for p in self.store.profiles(self.run_id)}
        children: dict[str, int] = {}
        for c in cands:
            children[c["parent_id"]] = children.get(c["parent_id"], 0) + 1

        def depth(c: dict) -> int:
            d = 0
            while c["parent_id"] in by_id:
                c, d = by_id[c["parent_id"]], d + 1
            return d

        return {c["id"]: self.view(c, depth(c), children.get(c["id"], 0), profiles.get(c["id"])) for c in cands}

    def view(self, c: dict, depth: int = 0, n_children: int = 0, profile: dict | None = None) -> CandidateView:
        result = c["result"] or {}
        profile = profiling.seen(profile or self.store.profile(c["id"]), result)
        return CandidateView(
            id=c["id"], parent_id=c["parent_id"], hypothesis=c["hypothesis"], status=c["status"],
            geomean_us=c["geomean_us"], source=c["source"], message=c["message"],
            shape_times={shape_label(s["shape"]): s["time_us"] for s in result.get("shapes", []) if s.get("time_us")},
            depth=depth, n_children=n_children, coverage=coverage(result, self.problem), profile=profile)

    def observe(self) -> None:
        """Tell the scientist how the numbers were measured: the device and timing of the (repaired) seed,
        the spread of repeated calls, the baselines and the physical floor."""
        cands = self.store.candidates(self.run_id)
        roots = [c for c in cands if c["iteration"] == 0 and c["kind"] in ("seed", "repair") and c["result"]]
        seed = next((c["result"] for c in reversed(roots) if c["status"] == R.OK), roots[-1]["result"] if roots else None)
        info = (seed or {}).get("device") or {}
        device = describe(info.get("kind", ""), info.get("name", ""))
        target = getattr(self.scientist, "target", None) or run_target(None, device)
        kinds = {c["kind"]: c for c in cands}
        baselines = [(label, (kinds.get(kind) or {}).get("result")) for kind, label in
                     (("reference", "PyTorch eager"), ("compiled", "torch.compile (max-autotune)"),
                      ("vendor", f"vendor library: {vendor_title(self.problem)}"),
                      ("vendor_alone", "the vendor call alone, its inputs made in its layout beforehand (not a rival: "
                                       "kernels get the problem's layout)"))
                     if kind not in ("vendor", "vendor_alone") or kind in kinds]
        baselines += [(f"installed library: {c['hypothesis']}", c["result"]) for c in cands if c["kind"] == "library"]
        best = best_candidate(cands)
        self.scientist.observe(bench_from_results(device, target, seed, baselines, floor_times(seed),
                                                  leaders=compose.leaders_text(cands, best and best["id"])))
