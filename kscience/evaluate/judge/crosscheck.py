"""What the judge's own clock says a call took, and how far the worker's numbers may be believed (the
trusted side).

The judge brackets every call with its own clock (drive.py), and calls that do nothing (`null`) tell it
what a bracket costs without the candidate: the input writes, the flush, the output copy, the channel.
Its estimate of a call is the median timed bracket less the median empty one, where the empty one is
the lesser of the null calls of this round and those made before the candidate was imported (the
worker then held no candidate code, so nothing could have slowed them: a candidate that slows its own
null calls, which it can tell from timed ones, only raises its estimate). The estimate's uncertainty
comes from the spread of those brackets, with the timed calls' spread capped by the pristine calls'
wherever no other process shares the GPU: a candidate that makes its own calls erratic does not widen
what the judge allows.

On a GPU the worker's CUDA events time the call more finely than any host clock, so they are the
figure wherever they are no lower than the judge's estimate allows (`Estimate.low`); below that, the
judge's estimate is the figure. On the CPU the estimate is always the figure. Nothing here rejects for
noise: only a report that no honest worker could make (a host time longer than the judge's bracket
around it, a time that is not a number, a time below the physical floor) is refused.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy

CLOCK_SLACK_S = 0.05
# A call's host time may exceed the judge's bracket around the whole command by this much: both read
# CLOCK_MONOTONIC, and the bracket strictly contains the call.
WINDOW_SLACK_US = 1.0
# How far below the judge's estimate the worker's events may lie and still be the figure: Z standard
# errors of the estimate, this share of it (what the harness does around a timed call that a null call
# does not: the candidate's Python entry and exit), this many microseconds, and this share of what an
# empty call costs. The last is the judge's offset error: on an H200 an empty bracket cost
# 570-970 us (the judge's input write, fill and flush, two GPU context switches, the channel) and moved
# by up to 170 us between rounds of one evaluation, far beyond the standard error of its median
# (benchmarks/results/clock-agreement-NVIDIA_H200-2026-12-02.json); honest events then fell up to 50 us
# below the allowance without it. benchmarks/clock_precision.py measures what a forger still gains.
Z = 4.0
REL_SLACK, ABS_SLACK_US = 0.05, 2.0
OFFSET_SHARE = 0.1
# The timed calls' spread counts up to this many times the pristine null calls' (plus ABS_SLACK_US) where
# no other process shares the GPU.
SPREAD_CAP = 3.0
_MAD_SIGMA, _MEDIAN_SE = 1.4826, 1.2533  # sigma from a median absolute deviation; a median's standard error


@dataclasses.dataclass
class Empty:
    """What a call that does nothing costs by the judge's clock: median, sigma (from the MAD), count."""
    median_us: float
    sigma_us: float
    n: int

    @classmethod
    def of(cls, windows: list[float]) -> "Empty":
        if not windows:
            return cls(math.nan, math.nan, 0)
        return cls(statistics.median(windows), _sigma(windows), len(windows))

    def to_dict(self) -> dict:
        return {"median_us": round(self.median_us, 3), "sigma_us": round(self.sigma_us, 3), "n": self.n}


@dataclasses.dataclass
class Estimate:
    us: float  # the judge's own figure for the median call
    se_us: float  # its standard error
    each: list[float]  # per timed call: bracket less the empty cost
    empty_us: float = 0.0  # the empty cost taken off

    def low(self) -> float:
        """The least a median call can have taken, by the judge's clock."""
        return (self.us - Z * self.se_us - REL_SLACK * max(self.us, 0.0) - ABS_SLACK_US
                - OFFSET_SHARE * max(self.empty_us, 0.0))


def _sigma(x: list[float]) -> float:
    if len(x) < 2:
        return math.nan
    a = numpy.asarray(x, dtype=numpy.float64)
    return _MAD_SIGMA * float(numpy.median(numpy.abs(a - numpy.median(a))))


def estimate(calls, pristine: Empty, shared: bool = False) -> Estimate:
    """The judge's estimate of a round's median timed call. `pristine`: its null calls before the
    import; `shared`: other processes hold the GPU (contexts.py), whose time slices can make this
    round's empty calls dearer than the pristine ones and every bracket erratic."""
    timed = [c.window_us for c in calls if c.kind == "timed"]
    nulls = Empty.of([c.window_us for c in calls if c.kind == "null"])
    empty = nulls if shared or not pristine.n else min((nulls, pristine), key=lambda e: e.median_us
                                                       if math.isfinite(e.median_us) else math.inf)
    if not timed or not math.isfinite(empty.median_us):
        return Estimate(math.nan, math.inf, [])
    sigma_t = _sigma(timed) if len(timed) >= 2 else empty.sigma_us
    if not shared and pristine.n and math.isfinite(pristine.sigma_us):
        sigma_t = min(sigma_t, SPREAD_CAP * pristine.sigma_us + ABS_SLACK_US)
    se = _MEDIAN_SE * math.sqrt(sigma_t ** 2 / len(timed) + empty.sigma_us ** 2 / max(empty.n, 1))
    each = [w - empty.median_us for w in timed]
    return Estimate(statistics.median(each), se if math.isfinite(se) else math.inf, each, empty.median_us)


def clock_problem(calls, setup_s: float, prepare_wall_s: float) -> str | None:
    """The worker's numbers against the judge's own brackets: nothing may outlast its bracket."""
    if not calls:
        return "no time reported"
    for i, c in enumerate(calls):
        if (not (math.isfinite(c.event_us) and math.isfinite(c.host_us)) or c.host_us < 0 or c.event_us < 0
                or (c.kind != "null" and (c.event_us <= 0 or c.host_us <= 0))):
            return (f"non-positive or non-finite time reported (call {i + 1} of {len(calls)}, {c.kind}: "
                    f"events {c.event_us} us, host {c.host_us} us)")
    if not math.isfinite(setup_s) or setup_s < 0 or setup_s > prepare_wall_s + CLOCK_SLACK_S:
        return f"the worker's clock ({setup_s:.3f} s) ran ahead of the judge's ({prepare_wall_s:.3f} s)"
    for c in calls:
        if c.host_us > c.window_us + WINDOW_SLACK_US:
            return (f"a call the worker timed at {c.host_us:.1f} us took {c.window_us:.1f} us by the judge's "
                    "clock, from its inputs to its `done`: the worker's clock ran ahead of the judge's")
        if c.event_us > c.host_us * 1.05 + 5:
            return (f"a call's event time ({c.event_us:.1f} us) exceeds its synchronised host time "
                    f"({c.host_us:.1f} us)")
    return None


# The judge's estimate on the CPU is believed when its median is positive and the medians of its two
# halves (alternate calls) agree within this (ratio, slack in us); else the judge measures again.
REPEAT_RATIO, REPEAT_SLACK_US = 2.0, 50_000.0


def untrusted_estimate(each: list[float]) -> str | None:
    """Why the judge cannot take its own per-call estimates `each` as the figure, or None."""
    if not each:
        return "no timed call"
    med = statistics.median(each)
    if not med > 0:
        return f"its own estimate came out at {med:.1f} us"
    if len(each) >= 2:
        a, b = statistics.median(each[0::2]), statistics.median(each[1::2])
        if max(a, b) > REPEAT_RATIO * min(a, b) + REPEAT_SLACK_US:
            return f"its estimates of alternate calls disagree ({a:.1f} vs {b:.1f} us)"
    return None


def floor_problem(time_us: float, floor_us: float) -> str | None:
    if floor_us and time_us < floor_us:
        return f"impossible time {time_us:.2f} us: below the physical floor of {floor_us:.2f} us"
    return None
