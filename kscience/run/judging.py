"""The loop's side of evaluation: evaluation slots, verdicts, profile jobs and busy time.

Every line of the run evaluates through one `Judging`: it keeps at most `executor.capacity`
evaluations in flight (one per slot, numbered 0..capacity-1), asks the run's `EvaluationBudget`
(kscience.run.budget) before each, stores each verdict before announcing it, and measures, per
slot, how long an evaluation was in flight on it. A slot's busy time is what the loop sees: from
the request to its verdict (for a queue executor this includes the wait for a worker to claim
it). Busy time and this session's wall time are stored after each evaluation and at the end, so a
`kill -9` loses at most the wall time since the last verdict.

After each verdict its `Composer` (kscience.run.composing) looks for a per-shape composite to judge
through this same path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from kscience.run import confirm, profiling
from kscience.evaluate.profile import job as profile_job
from kscience.evaluate import result as R
from kscience.problems import Problem
from kscience.run.budget import EvaluationBudget
from kscience.run.composing import Composer
from kscience.run.events import CandidateEvaluated, CandidateProfiled, EvaluationWaiting
from kscience.run.in_flight import InFlight, has_started, name
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.scientist.candidate import Candidate
from kscience.scientist.rules import Rules
from kscience.record.snapshot import best_candidate, first_of_kind
from kscience.record.store import BASELINE_KINDS
from kscience.scientist.llm import BudgetExceeded

WAIT_LOOK_S = 1.0  # how often an evaluation in flight is asked what it waits for
WAIT_REPEAT_S = 300.0  # an unchanged wait is reported again after this long
IDLE_LOOK_S = 0.2  # how often a profile job or torch.compile's baseline looks for a slot no evaluation wants
RUNNING_SAY_S = 60.0  # an evaluation still queued or running says so after this long, and again as often
# The default limit per step: a candidate may be this many times slower than the seed's slowest step (a
# first compile, autotuning, a slower shape), and never below the floor (autotuning many configurations, a busy
# machine).
STEP_LIMIT_FACTOR, STEP_LIMIT_FLOOR_S = 10.0, 60.0
CANDIDATE_STEPS = ("import", "check", "time", "recheck")  # the phases in which the candidate's code runs
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


def step_limit(seed: Candidate | None) -> float | None:
    """The default per-step limit of a run's candidates: from its seed's own evaluation, None (the judge's own
    limits) until the seed was judged ok. The judge never raises its own limits for it."""
    if seed is None or not seed.ok or not seed.result:
        return None
    slowest = max((seed.result.phases_s.get(p, 0.0) for p in CANDIDATE_STEPS), default=0.0)
    return max(STEP_LIMIT_FACTOR * slowest, STEP_LIMIT_FLOOR_S)


class Judging:
    """`changed` is set after each verdict is announced (the controller waits on it to start lines);
    `profile` is the profiler the run asks for (None: none), `eval_timeout_s`, `build_limit_s` and
    `time_limit_s` the run's --eval-timeout and --build-limit and this session's --time-limit."""

    def __init__(self, executor, *, journal: Journal, stopping: Stopping, budget: EvaluationBudget,
                 problem: Problem, changed: asyncio.Event, profile: str | None = None,
                 eval_timeout_s: float | None = None, time_limit_s: float | None = None,
                 build_limit_s: float | None = None):
        self.executor, self.journal, self.stopping, self.budget = executor, journal, stopping, budget
        self.problem, self.changed, self.profile, self.eval_timeout_s = problem, changed, profile, eval_timeout_s
        self.build_limit_s = build_limit_s
        self.capacity = max(1, executor.capacity)
        self._free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(self.capacity):
            self._free.put_nowait(slot)
        self._profiling = asyncio.Lock()  # one profile job at a time, on one slot, yielding to evaluations
        self.no_ncu = False  # the judging machine said it has no Nsight Compute: not asked again this run
        self.profile_s = 0.0  # slot seconds profile jobs took, from request to answer
        self._queued = 0  # evaluations waiting for a slot: a profile job lets them go first
        self._baselines_out = 0  # baselines in flight: they take no slot (see _judge)
        self._no_baselines_out = asyncio.Event()
        self._no_baselines_out.set()
        self._confirming = asyncio.Lock()  # one same-host confirmation at a time (kscience.run.confirm)
        self.pairs = 0  # pairs submitted for confirmation this session
        self.profiles_beside: list[asyncio.Task] = []  # profiles no line waits for (evaluate's profile_beside)
        self.composer = Composer(journal, problem, budget, self.evaluate)  # composes after every verdict
        self.started = time.time()  # this session's clock, for busy fractions
        self._t0 = time.monotonic()
        self.time_limit_s = time_limit_s  # it ends evaluations in flight too
        self.busy_s = [0.0] * self.capacity
        self.evaluations = [0] * self.capacity
        self._baselines_timed_s, self._baselines_timed = 0.0, 0  # of busy_s: IDLE_SLOT_BASELINES' share
        self.asked = 0  # evaluations asked for and not yet over: waiting for a slot or in flight
        self.in_flight = InFlight(executor)  # what a queued evaluation is shown to wait behind

    # --- the slots -------------------------------------------------------------------------------
    def backlog_s(self) -> float | None:
        """Seconds the slots need for the evaluations asked for now, at this session's mean evaluation
        time; None until one has been timed."""
        timed = sum(self.evaluations) - self._baselines_timed  # a minutes-long torch.compile is no candidate
        if not timed:
            return None
        return (sum(self.busy_s) - self._baselines_timed_s) / timed * self.asked / self.capacity

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
        if twin is None:  # a candidate that would be the best, or a composite, holds on one host
            cand = await self._hold_best(cand, line)
        if twin is None and self.profile and not self.no_ncu and (
                profiling.candidate_to_profile(cand, self.journal.candidates())
                or (cand.ok and "ncu" in self.asked_for(cand))):
            if profile_beside:
                self.profiles_beside.append(asyncio.create_task(self._profile(cand, line)))
            else:
                await self._profile(cand, line)
        await self.composer.maybe_compose(cand.iteration, line)  # after every recorded verdict
        return cand

    def asked_for(self, cand: Candidate) -> list[str]:
        """The measurements the plan behind a candidate asked for (Plan.measure); [] for none."""
        if not cand.plan_id:
            return []
        row = next((p for p in self.journal.store.plans(self.journal.run_id) if p["id"] == cand.plan_id), None)
        return list(((row or {}).get("plan") or {}).get("measure") or [])

    async def _hold_best(self, cand: Candidate, line: int) -> Candidate:
        """After `cand`'s verdict: a composite judged beside the best, then the best settled against its
        close contenders from other hosts (kscience.run.confirm); one at a time. Returns cand as stored."""
        store = self.journal.store
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
        self.journal.stage("confirm", cand.iteration, f"{cand.id} beside {best.id} on one host", line)
        for _ in range(confirm.TRIES):
            self.pairs += 1
            tag = f"confirm {cand.id} vs {best.id} #{self.pairs}"  # a new request, not an earlier one's answer
            # Two slots held, then both requests go out with nothing between them.
            slots = [await self._free.get() for _ in range(min(2, self.capacity))]
            try:
                self.stopping.check()
                futures = [self.executor.submit(self._request(c, tag)) for c in (cand, best)]
            except BaseException:
                for slot in slots:
                    self._free.put_nowait(slot)
                raise
            mine, theirs = await asyncio.gather(
                self._judge(cand, line, tag, slots[0], futures[0]),
                self._judge(best, line, tag, slots[1] if len(slots) > 1 else None, futures[1]))
            if (mine.get("device") or {}).get("host") == (theirs.get("device") or {}).get("host"):
                self.journal.store.record_result(best.id, confirm.confirmed(theirs, cand, mine, best))
                return self.record_verdict(cand, confirm.confirmed(mine, best, theirs, cand))
        return self.record_verdict(cand, confirm.unconfirmed(cand.stored_result, confirm.TRIES))

    def _request(self, cand: Candidate, tag: str = "") -> R.EvalRequest:
        """The evaluation request for `cand`; a `tag` makes it a new request for the same source."""
        problem = self.problem
        timeout_s = self._time_left()
        if cand.kind in IDLE_SLOT_BASELINES:
            timeout_s = min(timeout_s, IDLE_SLOT_LIMIT_S) if timeout_s is not None else IDLE_SLOT_LIMIT_S
        return R.EvalRequest(problem=problem.locator, source=cand.source,
                             overrides=problem.overrides_for(cand.kind), shapes="all",
                             candidate_id=f"{cand.id} ({tag})" if tag else cand.id,
                             tolerance=problem.tolerance_for(cand.kind, cand.hypothesis),
                             baseline=cand.kind in BASELINE_KINDS, timeout_s=timeout_s,
                             step_limit_s=self.step_limit_for(cand), build_limit_s=self.build_limit_s)

    async def _judge(self, cand: Candidate, line: int, tag: str = "", slot: int | None = None,
                     future=None) -> dict:
        """One evaluation: on `slot` when the caller holds one for it (released here), else on the next free
        one, on none for a cheap baseline, on an idle one for IDLE_SLOT_BASELINES; `future` when the caller
        has submitted the request already."""
        baseline = cand.kind in BASELINE_KINDS and future is None
        slotless = baseline and cand.kind not in IDLE_SLOT_BASELINES
        if slot is None and not baseline and self._free.empty():  # the dashboard shows this line waiting
            self.journal.stage("queued", cand.iteration, cand.id, line)
        self.asked += 1
        try:
            if slotless:
                # A baseline takes no slot, so the seed and the baselines are asked for together (one batch of
                # a queue's requests, one round of a cluster's); the executor runs them as its capacity allows.
                # Not while a profile runs, whose counters would share the GPU with them; a profile waits for them.
                async with self._profiling:
                    self._baselines_out += 1
                    self._no_baselines_out.clear()
            elif baseline:
                slot = await self._idle_slot()
            elif slot is None:
                slot = await self._queued_for_slot(cand, line)
        except BaseException:
            self.asked -= 1
            raise
        started = time.monotonic()
        try:
            if future is None:
                self.stopping.check()
            self.journal.stage("evaluate", cand.iteration, cand.id, line)
            request = self._request(cand, tag)
            future = future or self.executor.submit(request)
            self.in_flight.add(name(cand), future)
            try:
                result = await self._outcome(cand, future, line, request.step_limit_s)
                if (result.status == R.TIMEOUT and self.time_limit_s is not None
                        and time.monotonic() - self._t0 >= self.time_limit_s):
                    # Cut by the session's time limit, not judged: it stays pending and a resume judges it.
                    raise BudgetExceeded(f"time limit reached: {self.time_limit_s:g}s (the evaluation of "
                                         f"{cand.id} in flight was ended; a resume evaluates it again)")
                return result.to_dict()
            except asyncio.CancelledError:
                # Interrupted: a started evaluation runs to its end in its own process anyway (the executor
                # waits for it on shutdown), so keep its verdict rather than redo it; one that the command's
                # Ctrl-C or SIGTERM ended unjudged raises here, and its candidate stays pending for a resume.
                # Its verdict is stored and announced like any other, so every view shows what a user saw judged.
                if not future.cancel():
                    with contextlib.suppress(Exception):
                        self.record_verdict(cand, future.result().to_dict())
                raise
        finally:
            self.asked -= 1
            self.in_flight.discard(future)
            if slotless:
                self._baselines_out -= 1
                if not self._baselines_out:
                    self._no_baselines_out.set()
            elif slot is not None:
                if future is not None:
                    self.busy_s[slot] += time.monotonic() - started
                    self.evaluations[slot] += 1
                    if baseline:
                        self._baselines_timed_s += time.monotonic() - started
                        self._baselines_timed += 1
                self._free.put_nowait(slot)
            with contextlib.suppress(Exception):  # a full disk must not hide the evaluation's own outcome
                self.save()

    async def _queued_for_slot(self, cand: Candidate, line: int) -> int:
        """The next free slot. While none is, the candidate says every RUNNING_SAY_S that it is queued and
        behind what: it has not started, whatever the evaluations holding the slots are doing."""
        if not self._free.empty():  # taken without yielding: the seed's request goes out before the baselines'
            return self._free.get_nowait()
        self._queued += 1
        getter, since = asyncio.ensure_future(self._free.get()), time.monotonic()
        try:
            while not (await asyncio.wait({getter}, timeout=RUNNING_SAY_S))[0]:
                self.journal.emit(EvaluationWaiting(candidate_id=cand.id, iteration=cand.iteration,
                                                    state=self.in_flight.queued(),
                                                    waited_s=round(time.monotonic() - since, 1), line=line))
            return getter.result()
        except BaseException:
            if not getter.cancel() and not getter.cancelled():  # it took a slot as the wait ended: give it back
                self._free.put_nowait(getter.result())
            raise
        finally:
            self._queued -= 1

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
                                 step_limit_from=where, interpreted=interpreted)

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
            best_us=best.geomean_us if best else None, seed_us=seed.geomean_us if seed else None))
        self.changed.set()
        return cand

    async def _outcome(self, cand: Candidate, future, line: int, step_limit_s: float | None = None) -> R.EvalResult:
        """The evaluation's result. One that waits outside this process (a queue) is reported while it
        waits, and a stop ends the wait: its request stays outstanding and a resumed run takes its result.
        One that runs long is reported every RUNNING_SAY_S: what its judge is doing, where the executor
        hears it, and the limit it runs under."""
        wrapped = asyncio.wrap_future(future)
        started, said, said_at = time.monotonic(), None, 0.0
        next_say = RUNNING_SAY_S
        while True:
            try:
                done, _ = await asyncio.wait({wrapped}, timeout=min(WAIT_LOOK_S, RUNNING_SAY_S))
            except asyncio.CancelledError:  # the caller takes the outcome from `future`: this copy goes unread
                wrapped.cancel()
                raise
            if done:
                return wrapped.result()
            state = self.executor.wait_state(future)
            if state is None:
                waited = time.monotonic() - started
                if waited >= next_say:
                    next_say = waited + RUNNING_SAY_S
                    limit = (f"limit {step_limit_s:g} s per step" if step_limit_s
                             else "the judge's limits, 120 s to 300 s per step")
                    if has_started(future):
                        said_now = f"{self.executor.doing(future) or 'still being judged'} ({limit})"
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
        unless profiling has taken less than PROFILE_SHARE of the slots' time. Its cost is shown, and
        never timed."""
        problem = self.problem
        shape = profiling.profile_shape(problem, cand.stored_result)
        if shape is None:
            return
        async with self._profiling:
            if self.no_ncu:  # said by the profile job this one waited behind
                return
            await self._no_baselines_out.wait()
            slot = await self._slot_for_profile()
            started, future = time.monotonic(), None
            try:
                self.journal.stage("profile", cand.iteration, cand.id, line)
                request = R.EvalRequest(problem=problem.locator, source=cand.source,
                                        overrides=dict(problem.overrides), candidate_id=cand.id, measure=[],
                                        profile_shape=shape)
                future = self.executor.submit(request)
                self.in_flight.add(f"the Nsight Compute profile of {cand.id}", future)
                answer = (await self._outcome(cand, future, line)).to_dict()
            finally:
                self.in_flight.discard(future)
                self.profile_s += time.monotonic() - started
                self._free.put_nowait(slot)
        record = answer.get("profile")
        if record is not None:
            self.journal.store.record_profile(cand.id, **record)
        elif answer.get("profile_said", "").startswith(profile_job.NO_NCU):
            self.no_ncu = True
        self.journal.emit(CandidateProfiled(
            candidate_id=cand.id, iteration=cand.iteration, profiler="ncu", profile_s=record and record["profile_s"],
            message=profiling.profiled_line(cand.id, record, [answer.get("profile_said")],
                                            host=(answer.get("device") or {}).get("host"))))

    async def _slot_for_profile(self) -> int:
        """A free slot once no evaluation waits for one, or at once while profiling's share of the slots'
        time stays within PROFILE_SHARE."""
        return await self._idle_slot(
            lambda: self.profile_s <= profiling.PROFILE_SHARE * self.capacity * (time.monotonic() - self._t0))

    async def _idle_slot(self, may_go_first=lambda: False) -> int:
        """A free slot once no evaluation waits for one, or at once while `may_go_first()`."""
        while True:
            if (self._queued == 0 or may_go_first()) and not self._free.empty():
                return self._free.get_nowait()
            self.stopping.check()
            await asyncio.sleep(IDLE_LOOK_S)

    # --- busy time -------------------------------------------------------------------------------
    def save(self) -> None:
        """Store each slot's busy time and evaluations with this session's wall time so far."""
        wall = time.monotonic() - self._t0
        for slot in range(self.capacity):
            self.journal.store.record_slot_time(self.journal.run_id, session=self.started, slot=slot, wall_s=wall,
                                            busy_s=self.busy_s[slot], evaluations=self.evaluations[slot])
