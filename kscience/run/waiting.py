"""Waiting for an evaluation in flight: its result, and what the run says while it waits.

One that waits outside this process (a queue) is reported while it waits, and a stop ends the wait: its
request stays outstanding and a resumed run takes its result. One that runs long is reported every
`say_running_after` its limit: what its judge is doing, where the executor hears it, and the limit it runs
under. `kscience eval` says the same words (`running_state`).
"""

from __future__ import annotations

import asyncio
import time

from kscience.evaluate import result as R
from kscience.run.events import EvaluationWaiting
from kscience.run.in_flight import InFlight, has_started
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.record.candidate import Candidate
from kscience.scientist.rules import judge_limits_text

WAIT_LOOK_S = 1.0  # how often an evaluation in flight is asked what it waits for
WAIT_REPEAT_S = 300.0  # an unchanged wait is reported again after this long
RUNNING_SAY_S = 60.0  # an evaluation still queued or running says so after this long, and again as often


def say_running_after(step_limit_s: float | None) -> float:
    """How long an evaluation runs before it says so (and how often it says it again): RUNNING_SAY_S, or the
    limit per step where that is shorter, since a user who set it counts that long as long."""
    return min(RUNNING_SAY_S, step_limit_s) if step_limit_s else RUNNING_SAY_S


def running_state(doing: str | None, step_limit_s: float | None) -> str:
    """What a long evaluation says of itself: what its judge is doing, and the limit it runs under. The words
    `kscience run` and `kscience eval` both print."""
    limit = f"limit {step_limit_s:g} s per step" if step_limit_s else f"the judge's limits, {judge_limits_text()} per step"
    return f"{doing or 'still being judged'} ({limit})"


async def outcome(future, cand: Candidate, line: int, *, executor, journal: Journal, stopping: Stopping,
                  in_flight: InFlight, step_limit_s: float | None = None) -> R.EvalResult:
    """The result of `future`, the evaluation of `cand` that `executor` was asked for, saying while it waits
    what it waits for (`in_flight`: what else is asked for, that a queued one waits behind)."""
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
        state = executor.wait_state(future)
        if state is None:
            waited = time.monotonic() - started
            if waited >= next_say:
                next_say = waited + say_every
                if has_started(future):
                    said_now = running_state(executor.doing(future), step_limit_s)
                else:  # behind the baselines judged beside the slots, in the executor
                    said_now = in_flight.queued(future)
                journal.emit(EvaluationWaiting(candidate_id=cand.id, iteration=cand.iteration, state=said_now,
                                               waited_s=round(waited, 1), line=line))
            continue
        if stopping.requested():
            future.cancel()
            raise Stopped("stopped while waiting for an evaluation")
        if state != said or time.monotonic() - said_at > WAIT_REPEAT_S:
            said, said_at = state, time.monotonic()
            journal.emit(EvaluationWaiting(candidate_id=cand.id, iteration=cand.iteration, state=state,
                                           waited_s=round(said_at - started, 1), line=line))
