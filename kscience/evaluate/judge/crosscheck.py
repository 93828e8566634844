"""Whether reported times are believable (the trusted side). Each check returns why not, or None.

The worker measures; the judge decides whether to believe it, from what it saw itself. The judge
brackets every timed call with its own clock (`drive.py`), and calls that do nothing (`null`)
tell it what that bracket costs without any work. So, per call, the judge knows an upper bound
(the whole bracket) and an estimate (the bracket minus the typical empty one) of what the call
took, without trusting anything the worker says. A reported time must fit inside the bracket and
must not be contradicted by the estimate; CUDA events must agree with the device-synchronised
host clock (work left on a side stream); and no time may beat the physical floor. There is no
check for answers reused across calls: no timed call sees content an earlier one saw (drive.py),
so a cache by content can only miss. On the CPU the judge's estimate is the figure itself, once
it is positive and agrees with itself (`untrusted_estimate`).
"""

from __future__ import annotations

import math
import statistics

CLOCK_SLACK_S = 0.05
# Host time minus event time beyond the idle gap, per call, that honest launches stay under:
# the larger of an absolute allowance and a share of the kernel time.
GAP_SLACK_US, GAP_SHARE = 50.0, 0.15  # an honest joined side stream reaches ~30 us on an H100
IDLE_GAP_CAP_US = 200.0  # an idle gap reported above this is not believed (it would hide side work)
# A call's host time may exceed the judge's bracket around the whole command by this much: both
# read CLOCK_MONOTONIC, and the bracket strictly contains the call.
WINDOW_SLACK_US = 1.0
# The judge's own estimate of a call may exceed the reported time by (ratio, slack us) on (GPU, CPU)
# before the report is called forged. On the GPU the estimate includes the harness's host work
# around a call that a null call skips (the candidate's launch path, the output's description) and
# the pipe's jitter: on an H100 honest seeds show 100-200 us of it, and single estimates swing by
# as much again, so the GPU check catches only gross forgeries (a kernel of a millisecond reported
# as tens of microseconds); CUDA events stay the figure. On an overloaded CPU
# machine (CI) both processes wait tens of milliseconds for a core, and that lands in the brackets.
JUDGE_RATIO = (2.0, 2.0)
JUDGE_SLACK_US = (500.0, 50_000.0)


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
        return f"worker's clock ({setup_s:.3f}s) ran ahead of the judge's ({prepare_wall_s:.3f}s)"
    for c in calls:
        if c.host_us > c.window_us + WINDOW_SLACK_US:
            return (f"a call the worker timed at {c.host_us:.1f} us took {c.window_us:.1f} us by the judge's "
                    "clock, from command to reply: the worker's clock ran ahead of the judge's")
        if c.event_us > c.host_us * 1.05 + 5:
            return "a call's event time exceeds its synchronized host time"
    return None


def unwaited_problem(calls, least_us: float) -> str | None:
    """On the GPU every call, empty ones included, overwrites the flush buffer and spins before its
    start event, and must wait for both: the judge's bracket cannot be shorter than they take.
    A worker that stopped waiting for the GPU (its synchronisation switched off) answers sooner."""
    brackets = sorted(c.window_us for c in calls)
    typical = brackets[len(brackets) // 2]
    if typical < least_us:
        return (f"the worker answered in {typical:.1f} us, before the GPU could have run the cache flush and spin "
                f"every call contains ({least_us:.1f} us at the least): it is not waiting for the GPU")
    return None


def judge_estimate(calls, empty_cap_us: float = math.inf) -> tuple[float, list[float]]:
    """(median, per-call list) of the judge's own estimate of each timed call: its bracket minus
    the median bracket of the calls that did nothing, that median capped at `empty_cap_us`. The
    cap matters because the candidate can tell a null call from a timed one (it shares the
    worker's process) and slow the null calls down, which would lower every estimate by as much:
    only the bracket of a timed call is an upper bound the candidate cannot bend."""
    nulls = [c.window_us for c in calls if c.kind == "null"]
    empty = min(statistics.median(nulls) if nulls else 0.0, empty_cap_us)
    each = [c.window_us - empty for c in calls if c.kind == "timed"]
    return (statistics.median(each) if each else math.nan), each


# The judge's estimate on the CPU is believed when its median is positive and the medians of its
# two halves (alternate calls) agree within this (ratio, slack in us); else the judge measures again.
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


# Every command, timed or null, builds its inputs inside the judge's bracket, so the estimate (a
# difference of brackets) carries the build's jitter, which grows with the build: GPU MODE's sort
# tasks build their numbers row by row from Python, and on an idle H100 null brackets of 17-480 ms
# have timed ones differ from them by -15 to +25 ms (8-16% of the build), for honest calls of 0.2-5 ms.
# This share of the judge's own build time (measured before the import, so no candidate code can
# stretch it: session.build_us) is allowed on top. The check can resolve no finer than that; where
# a build takes microseconds it adds microseconds.
BUILD_SHARE = 0.25


# On the GPU the estimate may also fall short of the reported median by at most this much (plus the same
# spread and build allowances) before the round is doubted. A worker that stopped waiting for the GPU leaves
# each timed call's work queued into the brackets after it, and where those are the null calls, sent mostly
# at the end of a round, the null median outgrows the timed one: an H100 saw 968.8 us reported for work of
# milliseconds with an estimate of -22,879 us. Honest rounds fell short by at most 1,934 us in the 944 shapes
# recorded by offline runs on H100s under load. The figure is the events, so the CPU, where
# the estimate is the figure, has no such check.
SHORTFALL_SLACK_US = 5_000.0


def forged_allowance_us(claimed_us: float, interpreted: bool, spread_us: float = 0.0, build_us: float = 0.0) -> float:
    """The most the judge's estimate may exceed a reported median before the report is doubted."""
    c = int(interpreted)
    return JUDGE_RATIO[c] * claimed_us + JUDGE_SLACK_US[c] + spread_us + BUILD_SHARE * build_us


def forged_time_problem(claimed_us: float, judged_us: float, interpreted: bool,
                        spread_us: float = 0.0, shared: bool = False, build_us: float = 0.0) -> str | None:
    """The worker's median against the judge's own estimate of the same calls. On a GPU `shared`
    with other processes each bracket also holds a wait for their time slices that varies by
    milliseconds (an honest fp8 seed of 66 us is estimated at about 1,775 us beside a busy neighbour
    on an H100), so there the spread of the null calls' brackets (`null_spread_us`) is allowed on
    top of the slack. Elsewhere the candidate made the spread: it is only named. On the GPU an estimate
    far below the report is doubted too (SHORTFALL_SLACK_US).
    `build_us`: the judge's own time to build the shape's inputs (BUILD_SHARE of it is allowed)."""
    allowed = spread_us if shared else 0.0
    too_long = judged_us > forged_allowance_us(claimed_us, interpreted, allowed, build_us)
    too_short = not interpreted and judged_us < claimed_us - (SHORTFALL_SLACK_US + allowed + BUILD_SHARE * build_us)
    if not (too_long or too_short):
        return None
    spread = ""
    if shared and spread_us:
        spread = f"; its brackets of null calls spread by {spread_us:.0f} us"
    elif spread_us > IDLE_GAP_CAP_US:
        spread = f"; its brackets of null calls spread by {spread_us:.0f} us with no other process on the GPU"
    if too_short:
        spread += "; the calls that do nothing took the longer: the timed calls' work ran outside their brackets"
    return (f"the worker reported {claimed_us:.1f} us per call, the judge's own clock saw about {judged_us:.1f} us"
            f"{spread}: the reported times are not what happened")


def null_spread_us(calls) -> float:
    """How much the judge's brackets around calls that do nothing varied within a round: tens of
    microseconds on a GPU of its own, milliseconds where other processes' time slices intervene.
    A candidate can widen it as well (work it left queued lands in later brackets; null calls it
    slows on purpose), so it is allowed only where another process holds the GPU (contexts.py)."""
    nulls = [c.window_us for c in calls if c.kind == "null"]
    return max(nulls) - min(nulls) if len(nulls) >= 2 else 0.0


def outside_us(events: list[float], hosts: list[float], idle_gap_us: float) -> float:
    """Median host time minus event time per call, beyond the idle gap: work the timed stream's
    events did not see. The idle gap is the clocks' fixed disagreement the worker measured, capped
    as it reaches the judge after the candidate's import. The worker's host clock starts when the
    GPU reaches the call (`clocks.reached`), so a wait for other processes' time slices is in
    neither figure."""
    return statistics.median(h - e for e, h in zip(events, hosts)) - min(max(idle_gap_us, 0.0), IDLE_GAP_CAP_US)


def side_work_allowance_us(event_us: float) -> float:
    """How much `outside_us` honest launches stay under, for a kernel of `event_us`."""
    return max(GAP_SLACK_US, GAP_SHARE * event_us)


def side_work_share(outside: float, event_us: float) -> float:
    """A recorded `outside_us` as a share of what the side-work check allowed it (above 1 rejects)."""
    return outside / side_work_allowance_us(event_us)


def side_work_problem(events: list[float], hosts: list[float], idle_gap_us: float,
                      shared_excess_us: float = 0.0, reference_us: float = 0.0) -> str | None:
    """On the GPU: the synchronised host clock saw work the timed stream's events did not.
    `shared_excess_us`: on a GPU shared with other processes, what the round's own null calls
    showed beyond the idle gap (`null_excess_us`); `reference_us`: what the problem's reference
    showed outside its own events on the shape (`reference_outside.py`). Both are allowed on top."""
    ev = statistics.median(events)
    excess = outside_us(events, hosts, idle_gap_us)
    if excess > side_work_allowance_us(ev) + shared_excess_us + reference_us:
        beside = f", beyond the {shared_excess_us:.1f} us its null calls showed" if shared_excess_us else ""
        beside += f" and the {reference_us:.1f} us the reference showed" if reference_us else ""
        return (f"about {excess:.1f} us per call ran outside the timed stream (event time {ev:.1f} us{beside}): "
                "work on a side stream or thread was not counted")
    return None


def null_excess_us(calls, idle_gap_us: float) -> float:
    """What the worker's null calls, which run nothing of the candidate's, showed outside their
    (empty) timed stream, beyond the idle gap, believed up to IDLE_GAP_CAP_US. Beside other
    processes on a loaded host every synchronised region shows tens of microseconds more than the
    idle gap measured before the import (50-63 us per call on two loaded H200s, enough to reject an
    honest 5 us kernel as side work). A candidate can raise it (a thread of its own keeping the GPU
    busy), so it is allowed only where another process holds the GPU (contexts.py), and only up to
    the cap."""
    nulls = [c for c in calls if c.kind == "null"]
    if not nulls:
        return 0.0
    excess = outside_us([c.event_us for c in nulls], [c.host_us for c in nulls], idle_gap_us)
    return min(max(excess, 0.0), IDLE_GAP_CAP_US)


def floor_problem(time_us: float, floor_us: float) -> str | None:
    if floor_us and time_us < floor_us:
        return f"impossible time {time_us:.2f} us: below the physical floor of {floor_us:.2f} us"
    return None
