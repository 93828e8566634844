"""The loop's side of evaluation: evaluation slots, verdicts, profile jobs and busy time.

Every line of the run evaluates through one `Judging`: it keeps at most `executor.capacity`
evaluations in flight (one per slot, numbered 0..capacity-1; the slots are the run's own, or shared
with the other runs of a campaign, kscience.run.slots), asks the run's `EvaluationBudget`
(kscience.run.budget) before each, stores each verdict before announcing it, and measures, per
slot, how long an evaluation was in flight on it, and how much of that was judged on a GPU. A slot's
busy time is what the loop sees: from the request to its verdict (for a queue executor this includes
the wait for a worker to claim it). Busy time and this session's wall time are stored after each evaluation and at the end, so a
`kill -9` loses at most the wall time since the last verdict.

After each verdict its `Composer` (kscience.run.composing) looks for a per-shape composite to judge
through this same path. Where the executor judges requests in batches (a queue), optional work (profiles,
same-host pairs) waits to go out with the next evaluation (kscience.run.held) instead of alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from functools import partial

from kscience.run import confirm, profiling
from kscience.evaluate.profile import job as profile_job
from kscience.evaluate import result as R
from kscience.problems import Problem, bundle
from kscience.problems.precision import DEFAULT_POLICY
from kscience.run.budget import EvaluationBudget
from kscience.run.composing import Composer
from kscience.run.events import CandidateEvaluated, CandidateProfiled, EvaluationWaiting
from kscience.run.held import Held, Job
from kscience.run.in_flight import has_started, name
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.run.limits import STEP_LIMIT_FACTOR, STEP_LIMIT_FLOOR_S, step_limit, stored_verdict
from kscience.run.slots import Slots
from kscience.record.candidate import EAGER_KIND, Candidate
from kscience.scientist.rules import Rules
from kscience.record.snapshot import best_candidate, first_of_kind
from kscience.record.store import BASELINE_KINDS
from kscience.scientist.llm import BudgetExceeded

WAIT_LOOK_S = 1.0  # how often an evaluation in flight is asked what it waits for
WAIT_REPEAT_S = 300.0  # an unchanged wait is reported again after this long
IDLE_LOOK_S = 0.2  # how often a profile job or torch.compile's baseline waiting for an idle slot looks for a stop
RUNNING_SAY_S = 60.0  # an evaluation still queued or running says so after this long, and again as often
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


def say_running_after(step_limit_s: float | None) -> float:
    """How long an evaluation runs before it says so (and how often it says it again): RUNNING_SAY_S, or the
    limit per step where that is shorter, since a user who set it counts that long as long."""
    return min(RUNNING_SAY_S, step_limit_s) if step_limit_s else RUNNING_SAY_S


def running_state(doing: str | None, step_limit_s: float | None) -> str:
    """What a long evaluation says of itself: what its judge is doing, and the limit it runs under. The words
    `kscience run` and `kscience eval` both print."""
    limit = f"limit {step_limit_s:g} s per step" if step_limit_s else "the judge's limits, 120 s to 300 s per step"
    return f"{doing or 'still being judged'} ({limit})"


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
        self.problem, self.changed, self.profile, self.eval_timeout_s = problem, changed, profile, eval_timeout_s
        self.build_limit_s = build_limit_s
        # The executor's slots: this run's own, or shared with the other runs of a campaign (kscience.run.slots)
        self.slots = slots or Slots.of(executor)
        self.slots.users.append(self)
        self.capacity = self.slots.capacity
        self.no_ncu = False  # the judging machine said it has no Nsight Compute: not asked again this run
        self.profile_s = 0.0  # slot seconds this run's profile jobs took, from request to answer
        self._confirming = asyncio.Lock()  # one same-host confirmation at a time (kscience.run.confirm)
        self.pairs = 0  # pairs submitted for confirmation this session
        self.profiles_beside: list[asyncio.Task] = []  # profiles no line waits for (evaluate's profile_beside)
        # Where a request alone costs a round trip of its own (Executor.batches), optional work is held for the
        # next evaluation, and its requests then take no slot, as the cheap baselines take none.
        self.batches = bool(getattr(executor, "batches", False))
        self.held = Held()
        self._went_with: dict[str, list[asyncio.Task]] = {}  # candidate -> the held jobs its evaluation took out
        self._pairing = False  # a job settling same-host pairs is held or running (one at a time)
        self._to_pair: set[str] = set()  # composites still to be judged beside the best
        self._pair_tries: dict[tuple[str, str], int] = {}  # pairs that landed on two hosts, and how often
        self.composer = Composer(journal, problem, budget, self.evaluate)  # composes after every verdict
        self.started = time.time()  # this session's clock, for busy fractions
        self._t0 = time.monotonic()
        self.time_limit_s = time_limit_s  # it ends evaluations in flight too
        self.busy_s = [0.0] * self.capacity
        self.gpu_busy_s = [0.0] * self.capacity  # of busy_s: evaluations judged on a GPU
        self.evaluations = [0] * self.capacity
        self._baselines_timed_s, self._baselines_timed = 0.0, 0  # of busy_s: IDLE_SLOT_BASELINES' share
        self.asked = 0  # evaluations asked for and not yet over: waiting for a slot or in flight
        self.in_flight = self.slots.in_flight  # what a queued evaluation is shown to wait behind
        self._problem_files: dict | None | bool = False  # packed on the first request (False: not yet)

    # --- the slots -------------------------------------------------------------------------------
    def verdicts_in_s(self) -> float | None:
        """Seconds until the evaluations asked for now all have their verdicts, from this session's own timings:
        the mean time an evaluation was in flight (a queue's round trip included), once per round of
        `capacity` evaluations they fill, and no sooner than the slots' whole backlog where other runs share
        them (kscience.run.slots); None until one has been timed."""
        timed = sum(self.evaluations) - self._baselines_timed  # a minutes-long torch.compile is no candidate
        if not timed:
            return None
        own = (sum(self.busy_s) - self._baselines_timed_s) / timed * math.ceil(self.asked / self.capacity)
        return max(own, self.slots.backlog_s() or 0.0)

    def work_s(self) -> float | None:
        """This run's evaluations asked for now at its mean evaluation time; None until one has been timed."""
        timed = sum(self.evaluations) - self._baselines_timed  # a minutes-long torch.compile is no candidate
        if not timed:
            return None
        return (sum(self.busy_s) - self._baselines_timed_s) / timed * self.asked

    def expected_s(self) -> float | None:
        """How long one evaluation of this problem takes: its seed's, else its reference's, as judged (None until
        one is). The shared slots serve the longest first."""
        for kind in ("seed", EAGER_KIND):
            judged = first_of_kind(self.journal.candidates(), kind)
            if judged is not None and judged.result is not None and judged.result.wall_s:
                return judged.result.wall_s
        return None

    @property
    def problem_files(self) -> dict | None:
        """The problem's files, sent with every request (kscience.problems.bundle): read once, when the first
        request is made, so every judge judges the problem this run loaded."""
        if self._problem_files is False:
            self._problem_files = bundle.pack(self.problem.locator)
        return self._problem_files

    # --- one evaluation --------------------------------------------------------------------------
    async def evaluate(self, cand: Candidate, line: int = 0, *, counted: bool = True,
                       profile_beside: bool = False) -> Candidate:
        """Judge a pending candidate (or reuse the verdict of the same source). `counted=False` for the
        baselines, which the evaluation budget neither counts nor refuses. `profile_beside`: the verdict
        returns before its Nsight Compute profile, which is taken while the caller goes on (the seed's:
        the first design need not wait for it; every design asked once it is stored shows it)."""
        store, run_id = self.journal.store, self.journal.run_id
        self.stopping.check()
        twin = store.evaluated_with_source(run_id, cand.source)
        if twin is not None:  # the same text was judged already: reuse its verdict, say so
            result = dict(twin.stored_result, message=f"same source as {twin.id}: {twin.stored_result['message']}")
        else:
            with self.budget.spending(counted):
                result = await self._judge(cand, line)
        cand = self.record_verdict(cand, result)
        # What went out with this evaluation comes back in its batch: the caller's next design sees it.
        await self.held.came_back(self._went_with.pop(cand.id, []))
        if twin is None:  # a candidate that would be the best, or a composite, holds on one host
            cand = await self._hold_best(cand, line)
        if twin is None and self.profile and not self.no_ncu and (
                profiling.candidate_to_profile(cand, self.journal.candidates())
                or (cand.ok and "ncu" in self.asked_for(cand))):
            if self.batches:  # alone, a profile job would cost a round trip of its own
                self.held.hold(Job(f"the Nsight Compute profile of {cand.id}", partial(self._profile, cand, line),
                                   partial(self._profile_skipped, cand)))
            elif profile_beside:
                self.profiles_beside.append(asyncio.create_task(self._profile(cand, line)))
            else:
                await self._profile(cand, line)
        await self.composer.maybe_compose(cand.iteration, line)  # after every recorded verdict
        return cand

    def asked_for(self, cand: Candidate) -> list[str]:
        """The measurements the plan behind a candidate asked for (Plan.measure); [] for none."""
        if not cand.plan_id:
            return []
        row = next((p for p in self.journal.store.plans(self.journal.run_id) if p.id == cand.plan_id), None)
        return list((row.plan if row else {}).get("measure") or [])

    async def _hold_best(self, cand: Candidate, line: int) -> Candidate:
        """After `cand`'s verdict: a composite judged beside the best, then the best settled against its
        close contenders from other hosts (kscience.run.confirm); one at a time, or where the executor batches,
        held to travel with the next evaluation. Returns cand as stored."""
        store = self.journal.store
        if self.batches:
            self._hold_pairs(store.candidate(cand.id))
            return store.candidate(cand.id)
        async with self._confirming:
            rival = confirm.rival(store.candidate(cand.id), self.journal.candidates())
            if rival is not None:
                await self._confirm(store.candidate(cand.id), rival, line)
        await self.settle(confirm.ROUNDS, line)
        return store.candidate(cand.id)

    async def settle(self, rounds: int, line: int = 0) -> None:
        """Judge the best beside its close contenders from other hosts, at most `rounds` pairs."""
        async with self._confirming:
            for _ in range(rounds):
                pair = confirm.unsettled(self.journal.candidates())
                if pair is None:
                    break
                await self._confirm(*pair, line)

    async def _confirm(self, cand: Candidate, best: Candidate, line: int) -> Candidate:
        """Judge `cand` and the current best again, submitted at once, until both verdicts come from one
        host (at most confirm.TRIES pairs); store those figures in place of the earlier ones."""
        for _ in range(confirm.TRIES):
            judged = await self._pair(cand, best, line)
            if judged is not None:
                return judged
        return self.record_verdict(cand, confirm.unconfirmed(cand.stored_result, confirm.TRIES))

    async def _pair(self, cand: Candidate, best: Candidate, line: int) -> Candidate | None:
        """One pair of `_confirm`: `cand` as stored once both verdicts came from one host, else None."""
        self.journal.stage("confirm", cand.iteration, f"{cand.id} beside {best.id} on one host", line)
        self.pairs += 1
        tag = f"confirm {cand.id} vs {best.id} #{self.pairs}"  # a new request, not an earlier one's answer
        # Two slots held (none where they travel with an evaluation), then both requests go out together.
        slots = [] if self.batches else await self._queued_for_slots(cand, line, min(2, self.capacity))
        try:
            self.stopping.check()
            futures = [self.executor.submit(self._request(c, tag)) for c in (cand, best)]
        except BaseException:
            for slot in slots:
                self.slots.give(slot)
            raise
        mine, theirs = await asyncio.gather(
            self._judge(cand, line, tag, slots[0] if slots else None, futures[0]),
            self._judge(best, line, tag, slots[1] if len(slots) > 1 else None, futures[1]))
        if (mine.get("device") or {}).get("host") != (theirs.get("device") or {}).get("host"):
            return None
        self.journal.store.record_result(best.id, confirm.confirmed(theirs, cand, mine, best))
        return self.record_verdict(cand, confirm.confirmed(mine, best, theirs, cand))

    # --- optional work held for the next evaluation (Executor.batches) ---------------------------
    def _hold_pairs(self, composite: Candidate | None = None) -> None:
        """Where the executor batches, the pairs to judge on one host (each composite beside the best, then the
        best beside its closest contender from another host) are settled by one job at a time, held to go out
        with the next evaluation; `composite` is a verdict just recorded that may need its pair."""
        if composite is not None and confirm.rival(composite, self.journal.candidates()) is not None:
            self._to_pair.add(composite.id)
        if not self._pairing and (self._to_pair or confirm.unsettled(self.journal.candidates())):
            self._pairing = True
            self.held.hold(Job("the same-host pairs", self._next_pair, self._pairs_skipped))

    async def _next_pair(self) -> None:
        """One pair, sent with the evaluation that released this job; the job is held again while any is left."""
        store = self.journal.store
        try:
            pair, composite = None, None
            while self._to_pair and pair is None:
                composite = store.candidate(self._to_pair.pop())
                rival = confirm.rival(composite, self.journal.candidates())
                pair = (composite, rival) if rival is not None else None
            pair = pair or confirm.unsettled(self.journal.candidates())
            if pair is not None and await self._pair(*pair, 0) is None:  # landed on two hosts
                key = (pair[0].id, pair[1].id)
                self._pair_tries[key] = self._pair_tries.get(key, 0) + 1
                if self._pair_tries[key] >= confirm.TRIES:
                    self.record_verdict(store.candidate(pair[0].id),
                                        confirm.unconfirmed(store.candidate(pair[0].id).stored_result, confirm.TRIES))
                elif composite is not None and pair[0].id == composite.id:
                    self._to_pair.add(composite.id)  # again, with the next evaluation
        finally:
            self._pairing = False
        self._hold_pairs()

    def _pairs_skipped(self, why: str) -> None:
        """The run ended before the held pairs went out: the composites waiting for theirs, and a best with a close
        contender from another host, are marked unconfirmed, saying why."""
        for cand_id in sorted(self._to_pair):
            self._unconfirmed(cand_id, why)
        self._to_pair.clear()
        pair = confirm.unsettled(self.journal.candidates())
        if pair is not None:
            self._unconfirmed(pair[0].id, why)

    def _unconfirmed(self, cand_id: str, why: str) -> None:
        cand = self.journal.store.candidate(cand_id)
        if not cand.notes.get("unconfirmed") and not cand.notes.get("slower_than"):
            self.record_verdict(cand, confirm.skipped(cand.stored_result, why))

    def _profile_skipped(self, cand: Candidate, why: str) -> None:
        self.journal.emit(CandidateProfiled(candidate_id=cand.id, iteration=cand.iteration, profiler="ncu",
                                            profile_s=None, message=f"profile ncu: {cand.id} not profiled: {why}"))

    async def finish(self, rounds: int) -> None:
        """At the end of a session: the best settled against close contenders from other hosts, at most `rounds`
        pairs. Where the executor batches, nothing more goes out alone: held work is recorded as skipped, an
        unsettled best as unconfirmed, and what travelled with the last evaluations comes back with them."""
        if not self.batches:
            await self.settle(rounds)
            return
        why = "the run's work ended before it could go out with an evaluation"
        await self.held.finish(why)
        self._pairs_skipped(why)  # a pair no job was held for (a best settled by the last pair sent)

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
                     future=None) -> dict:
        """One evaluation: on `slot` when the caller holds one for it (released here), else on the next free
        one, on none for a cheap baseline, on an idle one for IDLE_SLOT_BASELINES; `future` when the caller
        has submitted the request already."""
        baseline = cand.kind in BASELINE_KINDS and future is None
        # the cheap baselines, and a pair that goes out with an evaluation where the executor batches
        slotless = (baseline and cand.kind not in IDLE_SLOT_BASELINES) or (future is not None and self.batches)
        if slot is None and not baseline and not self.slots.free():  # the dashboard shows this line waiting
            self.journal.stage("queued", cand.iteration, cand.id, line)
        self.asked += 1
        try:
            if slotless:
                # A baseline takes no slot, so the seed and the baselines are asked for together (one batch of
                # a queue's requests, one round of a cluster's); the executor runs them as its capacity allows.
                # Not while a profile runs, whose counters would share the GPU with them; a profile waits for them.
                async with self.slots.profiling:
                    self.slots.baselines_out += 1
                    self.slots.no_baselines_out.clear()
            elif baseline:
                slot = await self._idle_slot()
            elif slot is None:
                (slot,) = await self._queued_for_slots(cand, line)
        except BaseException:
            self.asked -= 1
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
                result = await self._outcome(cand, future, line, request.step_limit_s)
                on_gpu = result.device.get("interpreted") is False
                if (result.status == R.TIMEOUT and self.time_limit_s is not None
                        and time.monotonic() - self._t0 >= self.time_limit_s):
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
            self.asked -= 1
            self.in_flight.discard(future)
            if slotless:
                self.slots.baselines_out -= 1
                if not self.slots.baselines_out:
                    self.slots.no_baselines_out.set()
            elif slot is not None:
                if future is not None:
                    held = time.monotonic() - started
                    self.busy_s[slot] += held
                    self.gpu_busy_s[slot] += held if on_gpu else 0.0
                    self.evaluations[slot] += 1
                    if baseline:
                        self._baselines_timed_s += held
                        self._baselines_timed += 1
                self.slots.give(slot)
            with contextlib.suppress(Exception):  # a full disk must not hide the evaluation's own outcome
                self.save()

    async def _queued_for_slots(self, cand: Candidate, line: int, count: int = 1) -> list[int]:
        """`count` slots, as the shared slots hand them out (kscience.run.slots). While they are not free, the
        candidate says every RUNNING_SAY_S that it is queued and behind what: it has not started, whatever the
        evaluations holding the slots are doing."""
        taken = self.slots.take_now(self, count)
        if taken is not None:  # taken without yielding: the seed's request goes out before the baselines'
            return taken
        getter, since = self.slots.wait(self, self.expected_s(), count), time.monotonic()
        try:
            while not (await asyncio.wait({getter}, timeout=RUNNING_SAY_S))[0]:
                self.journal.emit(EvaluationWaiting(candidate_id=cand.id, iteration=cand.iteration,
                                                    state=self.in_flight.queued(),
                                                    waited_s=round(time.monotonic() - since, 1), line=line))
            return getter.result()
        except BaseException:
            self.slots.withdraw(getter)  # slots it was handed as the wait ended go back
            raise

    def _time_left(self) -> float | None:
        """Seconds left of this session's --time-limit (None without one); raises once it is spent."""
        if self.time_limit_s is None:
            return None
        left = self.time_limit_s - (time.monotonic() - self._t0)
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

    def record_verdict(self, cand: Candidate, result: dict) -> Candidate:
        """Store an evaluation's verdict, then announce it (committed before anyone is told).
        This is the one place a candidate becomes recorded; `evaluate` composes after it (a verdict
        stored on Ctrl-C is composed on by the resumed run)."""
        store = self.journal.store
        cand = store.record_result(cand.id, result)
        store.record_profile(cand.id, **profiling.after_evaluation(self.problem, result))
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
        return seed is not None and seed.evaluated is not None and seed.evaluated < self.started

    async def _outcome(self, cand: Candidate, future, line: int, step_limit_s: float | None = None) -> R.EvalResult:
        """The evaluation's result. One that waits outside this process (a queue) is reported while it
        waits, and a stop ends the wait: its request stays outstanding and a resumed run takes its result.
        One that runs long is reported every `say_running_after` its limit: what its judge is doing, where the
        executor hears it, and the limit it runs under."""
        wrapped = asyncio.wrap_future(future)
        started, said, said_at = time.monotonic(), None, 0.0
        next_say = say_every = say_running_after(step_limit_s)
        while True:
            try:
                done, _ = await asyncio.wait({wrapped}, timeout=min(WAIT_LOOK_S, say_every))
            except asyncio.CancelledError:  # the caller takes the outcome from `future`: this copy goes unread
                wrapped.cancel()
                raise
            if done:
                return wrapped.result()
            state = self.executor.wait_state(future)
            if state is None:
                waited = time.monotonic() - started
                if waited >= next_say:
                    next_say = waited + say_every
                    if has_started(future):
                        said_now = running_state(self.executor.doing(future), step_limit_s)
                    else:  # behind the baselines judged beside the slots, in the executor
                        said_now = self.in_flight.queued(future)
                    self.journal.emit(EvaluationWaiting(candidate_id=cand.id, iteration=cand.iteration,
                                                        state=said_now, waited_s=round(waited, 1), line=line))
                continue
            if self.stopping.requested():
                future.cancel()
                raise Stopped("stopped while waiting for an evaluation")
            if state != said or time.monotonic() - said_at > WAIT_REPEAT_S:
                said, said_at = state, time.monotonic()
                self.journal.emit(EvaluationWaiting(candidate_id=cand.id, iteration=cand.iteration, state=state,
                                                waited_s=round(said_at - started, 1), line=line))

    async def _profile(self, cand: Candidate, line: int) -> None:
        """Nsight Compute on one shape of the candidate, as a profile job judged where evaluations are
        (profile/job.py: local slot, Ray, queue), on one slot and never ahead of a queued evaluation
        unless profiling has taken less than PROFILE_SHARE of the slots' time; where the executor batches,
        on none, going out with the evaluation that released it. Its cost is shown, and never timed."""
        shape = profiling.profile_shape(self.problem, cand.stored_result)
        if shape is None or self.no_ncu:
            return
        if self.batches:
            answer = await self._profile_job(cand, shape, line, None)
        else:
            async with self.slots.profiling:
                if self.no_ncu:  # said by the profile job this one waited behind
                    return
                await self.slots.no_baselines_out.wait()
                answer = await self._profile_job(cand, shape, line, await self._slot_for_profile())
        record = answer.get("profile")
        if record is not None:
            self.journal.store.record_profile(cand.id, **record)
        elif answer.get("profile_said", "").startswith(profile_job.NO_NCU):
            self.no_ncu = True
        self.journal.emit(CandidateProfiled(
            candidate_id=cand.id, iteration=cand.iteration, profiler="ncu", profile_s=record and record["profile_s"],
            message=profiling.profiled_line(cand.id, record, [answer.get("profile_said")],
                                            host=(answer.get("device") or {}).get("host"))))

    async def _profile_job(self, cand: Candidate, shape: dict, line: int, slot: int | None) -> dict:
        """The profile job's answer; `slot` (released here) is the one it holds, None for none."""
        problem = self.problem
        started, future = time.monotonic(), None
        try:
            self.journal.stage("profile", cand.iteration, cand.id, line)
            request = R.EvalRequest(problem=problem.locator, problem_files=self.problem_files, source=cand.source,
                                    overrides=dict(problem.overrides), candidate_id=cand.id, measure=[],
                                    profile_shape=shape)
            future = self.executor.submit(request)
            self.in_flight.add(f"the Nsight Compute profile of {cand.id}", future)
            return (await self._outcome(cand, future, line)).to_dict()
        finally:
            self.in_flight.discard(future)
            self.profile_s += time.monotonic() - started
            self.slots.profile_s += time.monotonic() - started
            if slot is not None:
                self.slots.give(slot)

    async def _slot_for_profile(self) -> int:
        """A free slot once no evaluation waits for one, or ahead of them while profiling's share of the slots'
        time (every run's that shares them) stays within PROFILE_SHARE."""
        slots = self.slots
        return await self._idle_slot(lambda: slots.profile_s <= profiling.PROFILE_SHARE * slots.capacity
                                     * slots.elapsed_s())

    async def _idle_slot(self, may_go_first=lambda: False) -> int:
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

    # --- busy time -------------------------------------------------------------------------------
    def save(self) -> None:
        """Store each slot's busy time and evaluations with this session's wall time so far."""
        wall = time.monotonic() - self._t0
        for slot in range(self.capacity):
            self.journal.store.record_slot_time(self.journal.run_id, session=self.started, slot=slot, wall_s=wall,
                                            busy_s=self.busy_s[slot], evaluations=self.evaluations[slot],
                                            gpu_busy_s=self.gpu_busy_s[slot])
