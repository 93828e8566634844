"""Timing one shape: the judge's own clock decides, the worker's events refine (the trusted side).

A round is one `prepare` and one run of judge-driven calls (`drive.run_calls`), every timed call on
inputs no earlier call saw. The judge's estimate of the median call (`crosscheck.estimate`) is its
brackets less what empty calls cost, the empty cost taken no higher than on the pristine worker before
the import. Then:

* A report no honest worker could make (a host time longer than the judge's bracket around it, a time
  that is not a number) rejects at once (`crosscheck.clock_problem`).
* On a GPU the figure is the median of the worker's CUDA events wherever it is no lower than the least
  the judge's clock allows (`Estimate.low`) nor than the physical floor. Where it is lower, the judge
  measures a second round, and if the events fall short again, its own estimate is the figure, and the
  shape's message says so: a worker that rewrites its events gains at most that allowance, and an
  honest one whose events the judge's clock cannot confirm (work on a stream the events do not cover,
  beside another process) is timed by that clock, never rejected for it.
* On the CPU the figure is the judge's estimate, once it is positive and the same on alternate calls
  (`crosscheck.untrusted_estimate`); otherwise it measures again, up to `ROUNDS`, and if its estimate
  never settles it records the least median of its brackets around whole calls: an upper bound that
  needs nothing from the worker.

Every output read in every round is rechecked against the judge's own answer.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

from kscience.evaluate.judge import crosscheck, drive
from kscience.evaluate.judge.buffers import ShapeBuffers
from kscience.evaluate.judge.driving import TimedSession

ROUNDS = (2, 3)  # at most this many rounds per shape on (GPU, CPU interpreter)


@dataclasses.dataclass
class Round:
    calls: list
    looks: list
    setup_s: float
    prepare_wall_s: float
    estimate: crosscheck.Estimate | None = None
    others: int | None = None  # GPU: contexts of other processes on it after the round (contexts.py)
    doubt: str | None = None  # why the worker's figure is not taken from this round, if anything


def time_shape(session: TimedSession, res, cap: int, plan: drive.Plan, warm_sets: int,
               buffers: ShapeBuffers, pristine: crosscheck.Empty, floor_us: float = 0.0) -> str | None:
    """Time `res.shape` into `res`; returns a rejection message, or None. `floor_us`: the least any kernel
    can take on this shape (events below it are not believed). Raises what drive.run_calls raises, and
    whatever `session.recheck` raises for a wrong output."""
    shape, interpreted = res.shape, session.device.interpreted
    rounds: list[Round] = []
    chosen = None
    while len(rounds) < ROUNDS[int(interpreted)]:
        with session.phase("time"):
            rnd = _round(session, shape, cap, plan, warm_sets, buffers)
        rounds.append(rnd)
        hard = crosscheck.clock_problem(rnd.calls, rnd.setup_s, rnd.prepare_wall_s)
        if hard:
            return hard
        rnd.estimate = crosscheck.estimate(rnd.calls, pristine, shared=bool(rnd.others))
        rnd.doubt = _doubt(rnd, interpreted, floor_us)
        if rnd.doubt is None:
            chosen = rnd
            break
    with session.phase("recheck"):
        for rnd in rounds:
            for look in rnd.looks:
                session.recheck(look, shape)
    _record(res, rounds, chosen, interpreted)
    return None


def _round(session: TimedSession, shape: dict, cap: int, plan: drive.Plan, warm_sets: int,
           buffers: ShapeBuffers) -> Round:
    warm = [drive.new_seed(session.used_seeds) for _ in range(warm_sets)]
    t0 = time.monotonic()
    buffers.send(session.worker.fd_socket)
    session.ask(dict(buffers.prepare_fields(), cmd="prepare", shape=shape, seeds=warm, warmup=plan.warmup,
                     max_output_bytes=cap), "time", shape)
    setup_s = _float(session.reply("time", shape).get("setup_s"))
    prepare_wall = time.monotonic() - t0
    calls, looks = drive.run_calls(session, shape, dataclasses.replace(plan, ready=list(plan.ready)), buffers,
                                   session.used_seeds, session.output_bytes)
    plan.ready.clear()  # each set built ahead serves one call
    others = None if session.device.interpreted else session.others_on_gpu()
    return Round(calls, looks, setup_s, prepare_wall, others=others)


def _doubt(rnd: Round, interpreted: bool, floor_us: float) -> str | None:
    """Why this round's figure cannot be taken as it stands, or None."""
    est = rnd.estimate
    if interpreted:
        unsure = crosscheck.untrusted_estimate(est.each)
        return f"the judge's own clock is unsure: {unsure}" if unsure else None
    events = statistics.median(c.event_us for c in rnd.calls if c.kind == "timed")
    if floor_us and events < floor_us:  # beside another process the judge's allowance can reach below it
        return f"the worker's CUDA events put a call at {events:,.2f} us, below the physical floor of {floor_us:,.2f} us"
    if events < est.low():
        return (f"the worker's CUDA events put a call at {events:,.1f} us, below the {est.low():,.1f} us the judge's "
                f"own clock allows (its estimate {est.us:,.1f} us, standard error {est.se_us:,.1f} us)")
    return None


def _record(res, rounds: list[Round], chosen: Round | None, interpreted: bool) -> None:
    """The figures of the chosen round: on the GPU its CUDA events, on the CPU the judge's estimate.
    Where no round could be chosen: on the GPU the judge's estimate of the last round; on the CPU its
    brackets around the timed calls of the round whose median bracket is least (an upper bound)."""
    clock = "judge's clock"
    if chosen is not None and not interpreted:
        figures, clock = [c.event_us for c in chosen.calls if c.kind == "timed"], "cuda events"
        est = chosen.estimate
    elif chosen is not None:
        figures, est = chosen.estimate.each, chosen.estimate
    elif not interpreted:
        chosen = rounds[-1]
        figures, est = chosen.estimate.each, chosen.estimate
    else:
        chosen = min(rounds, key=lambda r: statistics.median(_windows(r)))
        figures, est = _windows(chosen), chosen.estimate
        clock = "judge's clock (whole brackets)"
    res.time_us = statistics.median(figures)
    res.mean_us = statistics.fmean(figures)
    res.std_us = statistics.pstdev(figures)
    res.n = len(figures)
    res.judge_us = est.us if math.isfinite(est.us) else None
    res.judge_se_us = est.se_us if math.isfinite(est.se_us) else None
    res.clock = clock
    doubts = [r.doubt for r in rounds if r.doubt]
    if doubts:  # what the judge measured past, for the record, whole
        res.message = f"measured {len(rounds)} times: " + "; ".join(doubts)
        if clock != "cuda events":
            res.message += f"; the {clock} is recorded"


def _windows(rnd: Round) -> list[float]:
    return [c.window_us for c in rnd.calls if c.kind == "timed"]


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
