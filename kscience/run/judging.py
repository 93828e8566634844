"""The loop's side of evaluation: evaluation slots, the evaluation budget, verdicts and busy time.

Every line of the run evaluates through one `Judging`: it keeps at most `executor.capacity`
evaluations in flight (one per slot, numbered 0..capacity-1), refuses an evaluation once the
run's `--evaluations` budget is spoken for, stores each verdict before announcing it, and
measures, per slot, how long an evaluation was in flight on it. A slot's busy time is what the
loop sees: from the request to its verdict (for a queue executor this includes the wait for a
worker to claim it). Busy time and this session's wall time are stored after each evaluation and
at the end, so a `kill -9` loses at most the wall time since the last verdict.

After each verdict (and once the roots are judged) it composes: where the run's correct kernels
differ in which is fastest per shape, a composite candidate dispatching by shape
(kscience.scientist.compose) is written and judged through this same path, one composer at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from kscience.run import confirm, profiling
from kscience.evaluate import result as R
from kscience.run.events import CandidateEvaluated, CandidateProfiled, CandidateWritten, EvaluationWaiting, StageChanged
from kscience.run.line import EvaluationsSpent, Stopped, source_diff
from kscience.scientist import compose
from kscience.record.snapshot import best_candidate, first_of_kind, judged_count
from kscience.record.store import PENDING

WAIT_LOOK_S = 1.0  # how often an evaluation in flight is asked what it waits for
WAIT_REPEAT_S = 300.0  # an unchanged wait is reported again after this long


class Judging:
    def __init__(self, ctx, executor, max_evaluations: int | None):
        self.ctx, self.executor = ctx, executor  # ctx: the Controller (store, run, problem, bus, stop)
        self.capacity = max(1, executor.capacity)
        self.max_evaluations = max_evaluations
        self._free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(self.capacity):
            self._free.put_nowait(slot)
        self._reserved = 0  # evaluations asked for and not yet recorded: they count against the budget
        self._profiling = asyncio.Lock()  # one profile at a time, each with every evaluation slot held
        self._confirming = asyncio.Lock()  # one same-host confirmation at a time (kscience.run.confirm)
        self.pairs = 0  # pairs submitted for confirmation this session
        # One composer at a time (lines record verdicts concurrently); a verdict recorded while it works
        # makes it look again rather than start a second one (see maybe_compose).
        self._composing, self._compose_again = False, False
        self.started = time.time()  # this session's clock, for busy fractions
        self._t0 = time.monotonic()
        self.busy_s = [0.0] * self.capacity
        self.evaluations = [0] * self.capacity
        self.asked = 0  # evaluations asked for and not yet over: waiting for a slot or in flight

    # --- the budget ------------------------------------------------------------------------------
    def evaluations_left(self) -> int | None:
        """Evaluations the budget still allows beyond those recorded and those in flight; None: no budget."""
        if self.max_evaluations is None:
            return None
        return self.max_evaluations - judged_count(self.ctx.store.candidates(self.ctx.run_id)) - self._reserved

    def check_budget(self) -> None:
        """Raise EvaluationsSpent when nothing more may be evaluated (before writing what cannot be judged)."""
        left = self.evaluations_left()
        if left is not None and left <= 0:
            raise EvaluationsSpent(f"evaluation budget reached: {self.max_evaluations} evaluation(s)")

    def backlog_s(self) -> float | None:
        """Seconds the slots need for the evaluations asked for now, at this session's mean evaluation
        time; None until one has been timed."""
        timed = sum(self.evaluations)
        if not timed:
            return None
        return sum(self.busy_s) / timed * self.asked / self.capacity

    # --- one evaluation --------------------------------------------------------------------------
    async def evaluate(self, cand: dict, line: int = 0, *, counted: bool = True) -> dict:
        """Judge a pending candidate (or reuse the verdict of the same source). `counted=False` for the
        baselines, which the evaluation budget neither counts nor refuses."""
        ctx = self.ctx
        ctx.check_stop()
        twin = ctx.store.evaluated_with_source(ctx.run_id, cand["source"])
        if twin is not None:  # the same text was judged already: reuse its verdict, say so
            result = dict(twin["result"], message=f"same source as {twin['id']}: {twin['result']['message']}")
        else:
            if counted:
                self.check_budget()
            self._reserved += counted
            try:
                result = await self._judge(cand, line)
            finally:
                self._reserved -= counted
        cand = self.record_verdict(cand, result)
        if twin is None:  # a candidate that would be the best, or a composite, holds on one host
            cand = await self._hold_best(cand, line)
        if ctx.profile == "ncu" and twin is None and profiling.candidate_to_profile(
                cand, ctx.store.candidates(ctx.run_id)):
            await self._profile(cand, line)
        await self.maybe_compose(cand["iteration"], line)  # after every recorded verdict
        return cand

    async def _hold_best(self, cand: dict, line: int) -> dict:
        """After `cand`'s verdict: a composite judged beside the best, then the best settled against its
        close contenders from other hosts (kscience.run.confirm); one at a time. Returns cand's row."""
        ctx = self.ctx
        async with self._confirming:
            rival = confirm.rival(ctx.store.candidate(cand["id"]), ctx.store.candidates(ctx.run_id))
            if rival is not None:
                await self._confirm(ctx.store.candidate(cand["id"]), rival, line)
        await self.settle(confirm.ROUNDS, line)
        return ctx.store.candidate(cand["id"])

    async def settle(self, rounds: int, line: int = 0) -> None:
        """Judge the best beside its close contenders from other hosts, at most `rounds` pairs."""
        async with self._confirming:
            for _ in range(rounds):
                pair = confirm.unsettled(self.ctx.store.candidates(self.ctx.run_id))
                if pair is None:
                    break
                await self._confirm(*pair, line)

    async def _confirm(self, cand: dict, best: dict, line: int) -> dict:
        """Judge `cand` and the current best again, submitted at once, until both verdicts come from one
        host (at most confirm.TRIES pairs); store those figures in place of the earlier ones."""
        ctx = self.ctx
        ctx.stage("confirm", cand["iteration"], f"{cand['id']} beside {best['id']} on one host", line)
        for _ in range(confirm.TRIES):
            self.pairs += 1
            tag = f"confirm {cand['id']} vs {best['id']} #{self.pairs}"  # a new request, not an earlier one's answer
            # Two slots held, then both requests go out with nothing between them.
            slots = [await self._free.get() for _ in range(min(2, self.capacity))]
            try:
                ctx.check_stop()
                futures = [self.executor.submit(self._request(c, tag)) for c in (cand, best)]
            except BaseException:
                for slot in slots:
                    self._free.put_nowait(slot)
                raise
            mine, theirs = await asyncio.gather(
                self._judge(cand, line, tag, slots[0], futures[0]),
                self._judge(best, line, tag, slots[1] if len(slots) > 1 else None, futures[1]))
            if (mine.get("device") or {}).get("host") == (theirs.get("device") or {}).get("host"):
                ctx.store.record_result(best["id"], confirm.confirmed(theirs, cand, mine, best))
                return self.record_verdict(cand, confirm.confirmed(mine, best, theirs, cand))
        return self.record_verdict(cand, confirm.unconfirmed(cand["result"], confirm.TRIES))

    def _request(self, cand: dict, tag: str = "") -> R.EvalRequest:
        """The evaluation request for `cand`; a `tag` makes it a new request for the same source."""
        problem = self.ctx.problem
        return R.EvalRequest(problem=problem.locator, source=cand["source"], overrides=dict(problem.overrides),
                             shapes="all", candidate_id=f"{cand['id']} ({tag})" if tag else cand["id"],
                             tolerance=problem.tolerance_for(cand["kind"]))

    async def _judge(self, cand: dict, line: int, tag: str = "", slot: int | None = None,
                     future=None) -> dict:
        """One evaluation on a slot: `slot` when the caller holds one for it (released here), else the next
        free; `future` when the caller has submitted the request already."""
        ctx = self.ctx
        if slot is None and self._free.empty():  # the dashboard shows this line waiting for the evaluator
            ctx.stage("queued", cand["iteration"], cand["id"], line)
        self.asked += 1
        try:
            slot = await self._free.get() if slot is None else slot
        except BaseException:
            self.asked -= 1
            raise
        started = time.monotonic()
        try:
            if future is None:
                ctx.check_stop()
            ctx.stage("evaluate", cand["iteration"], cand["id"], line)
            future = future or self.executor.submit(self._request(cand, tag))
            try:
                return (await self._outcome(cand, future, line)).to_dict()
            except asyncio.CancelledError:
                # Ctrl-C: a started evaluation runs to its end in its own process anyway (the executor
                # waits for it on shutdown), so keep its verdict rather than redo it. Its verdict is
                # stored and announced like any other, so every view shows the candidate a user saw judged.
                if not future.cancel():
                    with contextlib.suppress(Exception):
                        self.record_verdict(cand, future.result().to_dict())
                raise
        finally:
            self.asked -= 1
            if future is not None:
                self.busy_s[slot] += time.monotonic() - started
                self.evaluations[slot] += 1
            self._free.put_nowait(slot)
            with contextlib.suppress(Exception):  # a full disk must not hide the evaluation's own outcome
                self.save()

    def record_verdict(self, cand: dict, result: dict) -> dict:
        """Store an evaluation's verdict, then announce it (committed before anyone is told).
        This is the one place a candidate becomes recorded; `evaluate` composes after it (a verdict
        stored on Ctrl-C is composed on by the resumed run)."""
        ctx = self.ctx
        cand = ctx.store.record_result(cand["id"], result)
        ctx.store.record_profile(cand["id"], **profiling.after_evaluation(ctx.problem, result))
        cands = ctx.store.candidates(ctx.run_id)
        best, seed = best_candidate(cands), first_of_kind(cands, "seed")
        ctx.emit(CandidateEvaluated(candidate_id=cand["id"], parent_id=cand["parent_id"], kind=cand["kind"],
                                    iteration=cand["iteration"], hypothesis=cand["hypothesis"],
                                    status=cand["status"], geomean_us=cand["geomean_us"], message=cand["message"],
                                    best_us=best["geomean_us"] if best else None,
                                    seed_us=seed["geomean_us"] if seed else None))
        ctx.changed.set()
        return cand

    # --- per-shape composition (kscience/scientist/compose.py) -----------------------------------
    async def maybe_compose(self, iteration: int, line: int = 0) -> None:
        """Judge a pending composite (a resumed run), then build and judge a new one when the correct
        kernels differ in which is fastest per shape and no composite of the same parts and rules exists.
        Called after every recorded verdict and once the roots are judged. Lines record verdicts at once,
        so one caller composes at a time: a call while it works (its own composite's verdict included)
        only asks it to look again at the store once it is done, so no state is composed twice or missed."""
        self._compose_again = True
        if self._composing:
            return
        self._composing = True
        try:
            while self._compose_again:
                self._compose_again = False
                await self._compose(iteration, line)
        except EvaluationsSpent:  # the budget is spoken for: a composite is neither written nor judged
            pass
        finally:
            self._composing = False

    async def _compose(self, iteration: int, line: int) -> None:
        ctx = self.ctx
        for cand in ctx.store.candidates(ctx.run_id):
            if cand["kind"] == compose.KIND and cand["status"] == PENDING:
                await self.evaluate(cand, line)
        cands = ctx.store.candidates(ctx.run_id)
        comp = compose.plan(ctx.problem, cands)
        if comp is None:
            return
        sources = {c["id"]: c["source"] for c in cands}
        text = compose.source(comp, sources)
        if any(c["source"] == text for c in cands):
            return
        self.check_budget()  # nothing is written that the budget could not judge
        ctx.stage("compose", iteration, compose.summary(comp), line)
        cand = ctx.store.add_composite(ctx.run_id, parts=comp.parts, rules=comp.to_dict(), kind=compose.KIND,
                                       source=text, hypothesis=compose.summary(comp), iteration=iteration,
                                       parent_id=comp.fallback)
        ctx.emit(CandidateWritten(candidate_id=cand["id"], parent_id=comp.fallback, kind=compose.KIND,
                                  iteration=iteration, plan_title=cand["hypothesis"], status=cand["status"],
                                  diff=source_diff(sources[comp.fallback], text)))
        await self.evaluate(cand, line)

    async def _outcome(self, cand: dict, future, line: int) -> R.EvalResult:
        """The evaluation's result. One that waits outside this process (a queue) is reported while it
        waits, and a stop ends the wait: its request stays outstanding and a resumed run takes its result."""
        wrapped = asyncio.wrap_future(future)
        started, said, said_at = time.monotonic(), None, 0.0
        while True:
            done, _ = await asyncio.wait({wrapped}, timeout=WAIT_LOOK_S)
            if done:
                return wrapped.result()
            state = self.executor.wait_state(future)
            if state is None:
                continue
            if self.ctx.stop_requested():
                future.cancel()
                raise Stopped("stopped while waiting for an evaluation")
            if state != said or time.monotonic() - said_at > WAIT_REPEAT_S:
                said, said_at = state, time.monotonic()
                self.ctx.emit(EvaluationWaiting(candidate_id=cand["id"], iteration=cand["iteration"], state=state,
                                                waited_s=round(said_at - started, 1), line=line))

    async def _profile(self, cand: dict, line: int) -> None:
        """Nsight Compute on one shape of the candidate, on a thread so events keep flowing, with every
        evaluation slot held so nothing is timed meanwhile. Its cost is shown, and never timed."""
        ctx, said, held = self.ctx, [], []
        async with self._profiling:
            try:
                for _ in range(self.capacity):
                    held.append(await self._free.get())
                ctx.emit(StageChanged(stage="profile", iteration=cand["iteration"], detail=cand["id"], line=line))
                record = await asyncio.to_thread(profiling.profile_with_ncu, ctx.problem, cand["source"],
                                                 cand["result"], say=said.append)
            finally:
                for slot in held:
                    self._free.put_nowait(slot)
        if record is not None:
            ctx.store.record_profile(cand["id"], **record)
        ctx.emit(CandidateProfiled(candidate_id=cand["id"], iteration=cand["iteration"], profiler="ncu",
                                   profile_s=record and record["profile_s"],
                                   message=profiling.profiled_line(cand["id"], record, said)))

    # --- busy time -------------------------------------------------------------------------------
    def save(self) -> None:
        """Store each slot's busy time and evaluations with this session's wall time so far."""
        wall = time.monotonic() - self._t0
        for slot in range(self.capacity):
            self.ctx.store.record_slot_time(self.ctx.run_id, session=self.started, slot=slot, wall_s=wall,
                                            busy_s=self.busy_s[slot], evaluations=self.evaluations[slot])
