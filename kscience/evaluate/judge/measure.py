"""Timing one shape, and deciding on repeated evidence (the trusted side).

A round is one `prepare` and one run of judge-driven calls (`drive.run_calls`), every call on
inputs no earlier call saw. After a round the judge asks two questions of what it measured:

* Is anything wrong with the worker's numbers (`crosscheck`)? A host time longer than the
  judge's own bracket around it is impossible whatever the load, and rejects at once. A doubt
  that host noise could raise (the judge's estimate far above the events, side work beyond the
  idle gap, a bracket shorter than the flush) is only a doubt: the judge measures a second
  round, and rejects only if that round raises a doubt too, quoting both: one pair of noisy
  brackets on a busy host is enough to make an honest kernel look like a cheat.
* On the CPU, can its own estimate be the figure (`crosscheck.untrusted_estimate`: positive, and
  the same on alternate calls)? If not, it measures again, up to `ROUNDS` times, and if its
  estimate never settles it records the least median of its brackets around whole calls: an
  upper bound that needs nothing from the worker. The worker's own figure never becomes the CPU
  time: the worker's clock is in the candidate's reach (a detoured or slowed CLOCK_MONOTONIC).

Every output read in every round is rechecked against the judge's own answer.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

from kscience.evaluate.judge import crosscheck, drive
from kscience.evaluate.judge.driving import TimedSession
from kscience.problems import shape_label

ROUNDS = (2, 3)  # at most this many rounds per shape on (GPU, CPU interpreter)
# Beside other processes on the GPU the judge's brackets wait milliseconds for their time slices,
# varying from call to call, and its estimate of a round swings with them: where other processes
# hold contexts on the GPU (contexts.py) and a round's null brackets spread by more than
# IDLE_GAP_CAP_US, a rejection needs this many doubted rounds in a row.
CONTENDED_ROUNDS = 4
# On the CPU the figure subtracts from each timed bracket the median null bracket, capped at what
# the candidate cannot inflate (see crosscheck.judge_estimate): the round trip of a message before
# any candidate code existed, plus twice what the judge itself takes to build this shape's inputs
# and copy them, plus this slack for the harness's own checks around a call (tens of microseconds
# measured). On a loaded machine honest null calls can cost more than the cap (35-80 ms were seen on
# a 2-core machine at load 5, where generating a softmax input alone took 24 ms); the figure then
# keeps the excess: too slow, never too fast.
NULL_SLACK_US = 1000.0


@dataclasses.dataclass
class Round:
    calls: list
    looks: list
    setup_s: float
    prepare_wall_s: float
    spread_us: float = 0.0  # GPU: how much the judge's brackets of null calls varied (crosscheck.null_spread_us)
    others: int | None = None  # GPU: contexts of other processes on it after the round (contexts.py)
    doubt: str | None = None  # why the judge does not believe this round, if anything


def time_shape(session: TimedSession, res, cap: int, plan: drive.Plan, warm_sets: int) -> str | None:
    """Time `res.shape` into `res`; returns a rejection message, or None. Raises drive.Unreadable,
    and whatever `session.recheck` raises for a wrong output."""
    shape, interpreted = res.shape, session.device.interpreted
    empty_cap = _empty_cap_us(session, shape) if interpreted else math.inf
    rounds: list[Round] = []
    chosen = None
    limit, needed = ROUNDS[int(interpreted)], 2
    while len(rounds) < limit:
        with session.phase("time"):
            rnd = _round(session, shape, cap, plan, warm_sets)
        rounds.append(rnd)
        hard = crosscheck.clock_problem(rnd.calls, rnd.setup_s, rnd.prepare_wall_s)
        if hard:
            return hard
        rnd.doubt = _doubt(session, rnd, empty_cap, shape)
        if rnd.others and rnd.spread_us > crosscheck.IDLE_GAP_CAP_US:
            limit = needed = max(limit, CONTENDED_ROUNDS)
        doubted = [r for r in rounds if r.doubt and not r.doubt.startswith(_UNSURE)]
        if len(doubted) >= needed:
            if needed == 2:
                return f"{doubted[0].doubt} (measured again: {doubted[1].doubt})"
            return (f"{doubted[0].doubt} (measured {len(doubted)} times beside other processes on the GPU; "
                    f"the last: {doubted[-1].doubt})")
        if rnd.doubt is None:
            chosen = rnd
            break
    with session.phase("recheck"):
        for rnd in rounds:
            for look in rnd.looks:
                session.recheck(look, shape)
    if chosen is None and not interpreted:  # doubted once, then the GPU budget of rounds ran out
        return f"{rounds[0].doubt} (measured once more: {rounds[-1].doubt})"
    _record(session, res, rounds, chosen, empty_cap)
    return None


_UNSURE = "the judge's own clock is unsure"


def _round(session: TimedSession, shape: dict, cap: int, plan: drive.Plan, warm_sets: int) -> Round:
    warm = [drive.new_seed(session.used_seeds) for _ in range(warm_sets)]
    t0 = time.monotonic()
    # On the GPU the worker copies each output as its call returns into the judge's own buffer, which
    # the judge reads itself; where the driver cannot share one, into a copy of its own (timing.py).
    keep_bytes = session.hand_over_output_buffer(shape) if session.keep is not None else 0
    session.ask({"cmd": "prepare", "shape": shape, "seeds": warm, "warmup": plan.warmup, "max_output_bytes": cap,
                 "copy_outputs": session.peek_pid is None and not keep_bytes, "keep_bytes": keep_bytes,
                 "keep_word": session.fill_word}, "time", shape)
    session.build_ahead(shape, plan.ready)  # while the worker prepares, untimed
    setup_s = _float(session.reply("time", shape).get("setup_s"))
    prepare_wall = time.monotonic() - t0
    calls, looks = drive.run_calls(session, shape, plan, cap, session.used_seeds)
    if session.device.interpreted:
        return Round(calls, looks, setup_s, prepare_wall)
    return Round(calls, looks, setup_s, prepare_wall, crosscheck.null_spread_us(calls), session.others_on_gpu())


def _doubt(session: TimedSession, rnd: Round, empty_cap: float, shape: dict) -> str | None:
    """What host noise could have raised against this round, or None. The worker's figure is
    compared with the judge's plain estimate (null brackets uncapped, so host load that slows
    null calls as much as timed ones cancels); the CPU figure is the capped estimate."""
    timed = [c for c in rnd.calls if c.kind == "timed"]
    events, hosts = [c.event_us for c in timed], [c.host_us for c in timed]
    claimed = statistics.median(events) if events else math.nan
    judged, _ = crosscheck.judge_estimate(rnd.calls)
    problem = None
    if not session.device.interpreted:
        problem = crosscheck.unwaited_problem(rnd.calls, session.least_call_us())
        gap, shared = session.worker_info.get("idle_gap_us", 0.0), _shared_excess_us(session, rnd)
        if not problem and crosscheck.side_work_problem(events, hosts, gap, shared):
            # what the trusted reference shows outside its own events is no candidate's side work
            problem = crosscheck.side_work_problem(events, hosts, gap, shared, session.reference_outside_us(shape))
            if problem and not rnd.others:  # not allowed here, only said: a slow host shows in empty calls too
                problem += (f" (its null calls showed {crosscheck.null_excess_us(rnd.calls, gap):.1f} us outside "
                            "their empty stream)")
    problem = problem or crosscheck.forged_time_problem(claimed, judged, session.device.interpreted, rnd.spread_us,
                                                        shared=bool(rnd.others), build_us=session.build_us(shape))
    if problem is None and session.device.interpreted:
        unsure = crosscheck.untrusted_estimate(crosscheck.judge_estimate(rnd.calls, empty_cap)[1])
        problem = f"{_UNSURE}: {unsure}" if unsure else None
    return problem


def _shared_excess_us(session: TimedSession, rnd: Round) -> float:
    """What the side-work check allows on top beside other processes (crosscheck.null_excess_us); 0 elsewhere."""
    return crosscheck.null_excess_us(rnd.calls, session.worker_info.get("idle_gap_us", 0.0)) if rnd.others else 0.0


def _record(session: TimedSession, res, rounds: list[Round], chosen: Round | None, empty_cap: float) -> None:
    """The figures: CUDA events of the chosen round on the GPU; on the CPU the judge's own estimate
    of the chosen round, or, where no round's estimate could be trusted, its brackets around the
    timed calls of the round whose median bracket is least (an upper bound)."""
    if session.device.interpreted:
        if chosen is not None:
            judged, figures = crosscheck.judge_estimate(chosen.calls, empty_cap)
        else:
            chosen = min(rounds, key=lambda r: statistics.median(_windows(r)))
            figures = _windows(chosen)
            judged = statistics.median(figures)
    else:
        timed = [c for c in chosen.calls if c.kind == "timed"]
        figures = [c.event_us for c in timed]
        judged, _ = crosscheck.judge_estimate(chosen.calls)
        res.outside_us = (crosscheck.outside_us(figures, [c.host_us for c in timed],
                                                session.worker_info.get("idle_gap_us", 0.0))
                          - _shared_excess_us(session, chosen)  # as the side-work check weighed it
                          - session.reference_outside.get(shape_label(res.shape), 0.0))
    res.time_us = statistics.median(figures)
    res.mean_us = statistics.fmean(figures)
    res.std_us = statistics.pstdev(figures)
    res.judge_us = judged
    res.build_us = session.build_us(res.shape)
    res.n = len(figures)
    if len(rounds) > 1:  # the doubts the judge measured past, for the record
        res.message = f"measured {len(rounds)} times: " + "; ".join(r.doubt for r in rounds if r.doubt)[:300]


def _windows(rnd: Round) -> list[float]:
    return [c.window_us for c in rnd.calls if c.kind == "timed"]


def _empty_cap_us(session: TimedSession, shape: dict) -> float:
    """What a null call's bracket can honestly cost at most (see NULL_SLACK_US), from what the
    judge measured itself before the import: the pristine round trip, and building and copying the inputs."""
    return session.echo_us + 2 * session.build_us(shape) + NULL_SLACK_US


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
