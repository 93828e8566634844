"""The loop's side of evaluation: a candidate from its request to its stored, announced verdict.

Every line of the run evaluates through one `Judging`: it keeps at most `executor.capacity` evaluations
in flight (one per slot, numbered 0..capacity-1; the slots are the run's own, or shared with the other runs of
a campaign, and this run's use of them, with its busy time, is kscience.run.slot_use), asks the run's
`EvaluationBudget` (kscience.run.budget) before each, and stores each verdict before announcing it.

After each verdict a same-host pair may be judged (kscience.run.pairing), an Nsight Compute profile taken
(kscience.run.profile_jobs), and its `Composer` (kscience.run.composing) looks for a per-shape composite to
judge through this same path. Where the executor judges requests in batches (a queue), that optional work
waits to go out with the next evaluation (kscience.run.held) instead of alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace

from kscience.evaluate import result as R
from kscience.problems import Problem, bundle
from kscience.problems.precision import DEFAULT_POLICY
from kscience.run import profiling
from kscience.run.budget import EvaluationBudget
from kscience.run.composing import Composer
from kscience.run.events import CandidateEvaluated
from kscience.run.held import Held
from kscience.run.in_flight import name
from kscience.run.journal import Journal, Stopping
from kscience.run.limits import STEP_LIMIT_FACTOR, STEP_LIMIT_FLOOR_S, step_limit, stored_verdict
from kscience.run.pairing import Pairing
from kscience.run.profile_jobs import ProfileJobs
from kscience.run.slot_use import SlotUse
from kscience.run.slots import Slots
from kscience.run.verdict import Verdict
from kscience.run.waiting import outcome
from kscience.record.candidate import Candidate
from kscience.scientist.llm import BudgetExceeded
from kscience.scientist.rules import Rules
from kscience.record.snapshot import best_candidate, first_of_kind
from kscience.record.store import BASELINE_KINDS

# Baselines judged on a slot that no evaluation waits for, rather than beside the slots as the cheap ones are.
# torch.compile's max-autotune holds a GPU for minutes (325 s of a 400 s fp8 run on an H100): beside the slots
# it would share a GPU with a child's timing, and ahead of queued children it would hold every line's work
# back. It is asked for once the seed settles, when the slot is idle anyway while the lines' first designs and
# writes (two model answers) are under way, so on a fresh run it starts at once; a child written meanwhile
# waits at most for its end, once per run (a later run on the same GPU reuses it), while on a resumed run
# with children waiting it goes after them. Waiting for a slot no child wants, rather than for the run's
# end, keeps torch.compile in the designers' prompts for most of the run.
IDLE_SLOT_BASELINES = ("compiled",)
# The longest such a baseline may take. The other built-ins compile in 28-143 s on an H100, but the fp8 GEMM's
# reference, each of its 27 shapes autotuned, was still compiling after 780 s, and every child waited for the
# one GPU meanwhile. Past this limit it is recorded as timed out, with the limit in its message, and a resumed
# run does not ask for it again.
IDLE_SLOT_LIMIT_S = 300.0


class Judging:
    """`changed` is set after each verdict is announced (the controller waits on it to start lines);
    `profile` is the profiler the run asks for (None: none), `eval_timeout_s`, `build_limit_s` and
    `time_limit_s` the run's --eval-timeout and --build-limit and this session's --time-limit, `precision`
    its --precision."""

    def __init__(self, executor, *, journal: Journal, stopping: Stopping, budget: EvaluationBudget,
                 problem: Problem, changed: asyncio.Event, profile: str | None = None,
                 eval_timeout_s: float | None = None, time_limit_s: float | None = None,
                 build_limit_s: float | None = None, slots: Slots | None = None, precision: str = DEFAULT_POLICY):
        self.executor, self.journal, self.stopping, self.budget = executor, journal, stopping, budget
        self.precision = precision  # the run's --precision, sent with every request (baselines are only marked)
        self.problem, self.changed, self.eval_timeout_s = problem, changed, eval_timeout_s
        self.build_limit_s = build_limit_s
        self.time_limit_s = time_limit_s  # it ends evaluations in flight too
        self.slots = slots or Slots.of(executor)
        self.in_flight = self.slots.in_flight  # what a queued evaluation is shown to wait behind (every run's)
        self.use = SlotUse(self.slots, journal=journal, stopping=stopping, in_flight=self.in_flight)
        # Where a request alone costs a round trip of its own (Executor.batches), optional work is held for the
        # next evaluation, and its requests then take no slot, as the cheap baselines take none.
        self.batches = bool(getattr(executor, "batches", False))
        self.held = Held()
        self._went_with: dict[str, list[asyncio.Task]] = {}  # candidate -> the held jobs its evaluation took out
        self.pairing = Pairing(executor, journal=journal, stopping=stopping, use=self.use, held=self.held,
                               batches=self.batches, judge=self._judge, request=self._request,
                               record_verdict=self.record_verdict)
        self.profiles = ProfileJobs(executor, journal=journal, problem=problem, use=self.use, held=self.held,
                                    batches=self.batches, in_flight=self.in_flight, wait=self._wait,
                                    problem_files=lambda: self.problem_files, profile=profile)
        self.composer = Composer(journal, problem, budget, self.evaluate)  # composes after every verdict
        self._problem_files: dict | None | bool = False  # packed on the first request (False: not yet)

    @property
    def problem_files(self) -> dict | None:
        """The problem's files, sent with every request (kscience.problems.bundle): read once, when the first
        request is made, so every judge judges the problem this run loaded."""
        if self._problem_files is False:
            self._problem_files = bundle.pack(self.problem.locator)
        return self._problem_files

    # --- one evaluation --------------------------------------------------------------------------
    async def evaluate(self, cand: Candidate, line: int = 0, *, counted: bool = True,
                       profile_beside: bool = False, verdict_in: Callable[[], None] = lambda: None) -> Candidate:
        """Judge a pending candidate (or reuse the verdict of the same source). `counted=False` for the
        baselines, which the evaluation budget neither counts nor refuses. `profile_beside`: the verdict
        returns before its Nsight Compute profile, which is taken while the caller goes on (the seed's:
        the first design need not wait for it; every design asked once it is stored shows it). `verdict_in()`
        is called once the verdict is recorded, before the work that follows it."""
        self.stopping.check()
        twin = self.journal.judged_with_source(cand.source)
        if twin is not None:  # the same text was judged already: reuse its verdict, say so
            verdict = Verdict(replace(twin.result, message=f"same source as {twin.id}: {twin.result.message}"),
                              dict(twin.notes))
        else:
            with self.budget.spending(counted):
                verdict = await self._judge(cand, line)
        cand = self.record_verdict(cand, verdict)
        verdict_in()
        # What went out with this evaluation comes back in its batch: the caller's next design sees it.
        await self.held.came_back(self._went_with.pop(cand.id, []))
        if twin is None:  # a candidate that would be the best, or a composite, holds on one host
            cand = await self.pairing.after_verdict(cand, line)
            await self.profiles.after_verdict(cand, line, beside=profile_beside)
        await self.composer.maybe_compose(cand.iteration, line)  # after every recorded verdict
        return cand

    def _request(self, cand: Candidate, tag: str = "") -> R.EvalRequest:
        """The evaluation request for `cand`; a `tag` makes it a new request for the same source."""
        problem = self.problem
        timeout_s = self._time_left()
        if cand.kind in IDLE_SLOT_BASELINES:
            timeout_s = min(timeout_s, IDLE_SLOT_LIMIT_S) if timeout_s is not None else IDLE_SLOT_LIMIT_S
        return R.EvalRequest(problem=problem.locator, problem_files=self.problem_files, source=cand.source,
                             overrides=problem.overrides_for(cand.kind), shapes="all",
                             candidate_id=f"{cand.id} ({tag})" if tag else cand.id,
                             tolerance=problem.tolerance_for(cand.kind, cand.hypothesis),
                             baseline=cand.kind in BASELINE_KINDS, timeout_s=timeout_s,
                             step_limit_s=self.step_limit_for(cand), build_limit_s=self.build_limit_s,
                             precision=self.precision)

    async def _judge(self, cand: Candidate, line: int, tag: str = "", slot: int | None = None,
                     future=None) -> Verdict:
        """One evaluation: on `slot` when the caller holds one for it (released here), else on the next free
        one, on none for a cheap baseline, on an idle one for IDLE_SLOT_BASELINES; `future` when the caller
        has submitted the request already."""
        baseline = cand.kind in BASELINE_KINDS and future is None
        # the cheap baselines, and a pair that goes out with an evaluation where the executor batches
        slotless = (baseline and cand.kind not in IDLE_SLOT_BASELINES) or (future is not None and self.batches)
        if slot is None and not baseline and not self.slots.free():  # the dashboard shows this line waiting
            self.journal.stage("queued", cand.iteration, cand.id, line)
        self.use.asked += 1
        try:
            if slotless:
                # A baseline takes no slot, so the seed and the baselines are asked for together (one batch of
                # a queue's requests, one round of a cluster's); the executor runs them as its capacity allows.
                # Not while a profile runs, whose counters would share the GPU with them; a profile waits for them.
                async with self.slots.profiling:
                    self.slots.baselines_out += 1
                    self.slots.no_baselines_out.clear()
            elif baseline:
                slot = await self.use.idle_slot()
            elif slot is None:
                (slot,) = await self.use.queued_for_slots(cand, line)
        except BaseException:
            self.use.asked -= 1
            raise
        started, on_gpu = time.monotonic(), False
        try:
            if future is None:
                self.stopping.check()
            self.journal.stage("evaluate", cand.iteration, cand.id, line)
            request = self._request(cand, tag)
            if future is None:
                future = self.executor.submit(request)
                self._went_with.setdefault(cand.id, []).extend(self.held.release())  # optional work goes with it
            self.in_flight.add(name(cand), future)
            try:
                result = await self._wait(future, cand, line, request.step_limit_s)
                on_gpu = result.judged_on.interpreted is False
                if (result.status == R.TIMEOUT and self.time_limit_s is not None
                        and self.use.elapsed_s() >= self.time_limit_s):
                    # Cut by the session's time limit, not judged: it stays pending and a resume judges it.
                    raise BudgetExceeded(f"time limit reached: {self.time_limit_s:g}s (the evaluation of "
                                         f"{cand.id} in flight was ended; a resume evaluates it again)")
                return stored_verdict(result, request)
            except asyncio.CancelledError:
                # Interrupted: a started evaluation runs to its end in its own process anyway (the executor
                # waits for it on shutdown), so keep its verdict rather than redo it; one that the command's
                # Ctrl-C or SIGTERM ended unjudged raises here, and its candidate stays pending for a resume.
                # Its verdict is stored and announced like any other, so every view shows what a user saw judged.
                if not future.cancel():
                    with contextlib.suppress(Exception):
                        self.record_verdict(cand, stored_verdict(future.result(), request))
                raise
        finally:
            self.use.asked -= 1
            self.in_flight.discard(future)
            if slotless:
                self.slots.baselines_out -= 1
                if not self.slots.baselines_out:
                    self.slots.no_baselines_out.set()
            elif slot is not None:
                if future is not None:
                    self.use.held(slot, time.monotonic() - started, on_gpu=on_gpu, idle_slot_baseline=baseline)
                self.slots.give(slot)
            with contextlib.suppress(Exception):  # a full disk must not hide the evaluation's own outcome
                self.use.save()

    def _wait(self, future, cand: Candidate, line: int, step_limit_s: float | None = None):
        """The result of an evaluation asked for (kscience.run.waiting.outcome)."""
        return outcome(future, cand, line, executor=self.executor, journal=self.journal, stopping=self.stopping,
                       in_flight=self.in_flight, step_limit_s=step_limit_s)

    def _time_left(self) -> float | None:
        """Seconds left of this session's --time-limit (None without one); raises once it is spent."""
        if self.time_limit_s is None:
            return None
        left = self.time_limit_s - self.use.elapsed_s()
        if left <= 0:
            raise BudgetExceeded(f"time limit reached: {self.time_limit_s:g}s")
        return left

    def step_limit_for(self, cand: Candidate) -> float | None:
        """--eval-timeout, else the limit derived from the seed; the baselines (the problem's own code)
        get the judge's own limits."""
        if cand.kind in BASELINE_KINDS:
            return None
        if self.eval_timeout_s is not None:
            return self.eval_timeout_s
        return step_limit(first_of_kind(self.journal.candidates(), "seed"))

    def rules(self, interpreted: bool) -> Rules:
        """What this run's judging holds a kernel to, for the prompts: the limits `request_for` sends."""
        seed = first_of_kind(self.journal.candidates(), "seed")
        step = self.eval_timeout_s if self.eval_timeout_s is not None else step_limit(seed)
        where = ("--eval-timeout" if self.eval_timeout_s is not None else
                 f"{STEP_LIMIT_FACTOR:g}x the seed's slowest step, at least {STEP_LIMIT_FLOOR_S:g} s; "
                 "--eval-timeout sets it" if step is not None else "")
        return Rules.for_problem(self.problem, build_limit_s=self.build_limit_s or R.BUILD_LIMIT_S, step_limit_s=step,
                                 step_limit_from=where, interpreted=interpreted, precision=self.precision)

    def record_verdict(self, cand: Candidate, verdict: Verdict) -> Candidate:
        """Store an evaluation's verdict, then announce it (committed before anyone is told).
        This is the one place a candidate becomes recorded; `evaluate` composes after it (a verdict
        stored on Ctrl-C is composed on by the resumed run)."""
        cand = self.journal.record_result(cand.id, verdict)
        self.journal.record_profile(cand.id, **profiling.after_evaluation(self.problem, cand.stored_result))
        cands = self.journal.candidates()
        best, seed = best_candidate(cands), first_of_kind(cands, "seed")
        self.journal.emit(CandidateEvaluated(
            candidate_id=cand.id, parent_id=cand.parent_id, kind=cand.kind, iteration=cand.iteration,
            hypothesis=cand.hypothesis, status=cand.status, geomean_us=cand.geomean_us, message=cand.message,
            best_us=best.geomean_us if best else None, seed_us=seed.geomean_us if seed else None,
            seed_earlier=self.seed_timed_earlier(seed)))
        self.changed.set()
        return cand

    def seed_timed_earlier(self, seed: Candidate | None) -> bool:
        """Whether the seed's verdict comes from an earlier session of the run (before this resume)."""
        return seed is not None and seed.evaluated is not None and seed.evaluated < self.use.started
