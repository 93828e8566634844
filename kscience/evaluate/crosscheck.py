"""Whether reported times are believable (the trusted side). Each check returns why not, or None.

The worker measures; the judge decides whether to believe it, from what it saw itself. The judge
brackets every timed call with its own clock (`drive.py`), and calls that do nothing (`null`)
tell it what that bracket costs without any work. So, per call, the judge knows an upper bound
(the whole bracket) and an estimate (the bracket minus the typical empty one) of what the call
took, without trusting anything the worker says. A reported time must fit inside the bracket and
must not be contradicted by the estimate; CUDA events must agree with the device-synchronised
host clock (work left on a side stream); calls on never-seen inputs must not be much slower than
calls on inputs regenerated through the very same path (a cache keyed on input contents), both
by the worker's numbers and by the judge's brackets; and no time may beat the physical floor.
"""

from __future__ import annotations

import math
import statistics

CLOCK_SLACK_S = 0.05
# Host time minus event time beyond the idle gap, per call, that honest launches stay under:
# the larger of an absolute allowance and a share of the kernel time.
GAP_SLACK_US, GAP_SHARE = 50.0, 0.15  # 30 us was crossed (30.4) by an honest joined side stream on an H100
IDLE_GAP_CAP_US = 200.0  # an idle gap reported above this is not believed (it would hide side work)
# Calls on fresh inputs may be this much slower than calls on regenerated inputs before the
# difference counts as caching: (ratio, absolute slack in us) on (GPU, CPU interpreter). The CPU
# numbers are loose because one call each is compared, and on an overloaded CI machine a single
# call can wait 100 ms and more for a core.
CACHE_RATIO = (3.0, 5.0)
CACHE_SLACK_US = (50.0, 300_000.0)
# The same, on the judge's brackets (pipe jitter included). On the GPU 150 us falsely rejected two
# honest kernels in an H200 campaign (2026-11-23: events 21.8 vs 21.7 us, brackets 793 vs 1118 us;
# events 63.7 vs 62.7 us, brackets 10.5 vs 10.8 ms): the brackets of single calls swing by hundreds of
# microseconds, so on a GPU they catch only a miss that costs a millisecond or more.
CACHE_WINDOW_SLACK_US = (1000.0, 300_000.0)
# A call's host time may exceed the judge's bracket around the whole command by this much: both
# read CLOCK_MONOTONIC, and the bracket strictly contains the call.
WINDOW_SLACK_US = 1.0
# The judge's own estimate of a call may exceed the reported time by (ratio, slack us) on (GPU, CPU)
# before the report is called forged. On the GPU the estimate includes the harness's host work
# around a call that a null call skips (the candidate's launch path, the output's description) and
# the pipe's jitter: on an H100 (2026-11-23) honest seeds showed 100-200 us of it, and single
# estimates swung by as much again, so the GPU check catches only gross forgeries (a kernel of a
# millisecond reported as tens of microseconds); CUDA events stay the figure. On an overloaded CPU
# machine (CI) both processes wait tens of milliseconds for a core, and that lands in the brackets.
JUDGE_RATIO = (2.0, 2.0)
JUDGE_SLACK_US = (500.0, 50_000.0)


def clock_problem(calls, setup_s: float, prepare_wall_s: float) -> str | None:
    """The worker's numbers against the judge's own brackets: nothing may outlast its bracket."""
    if not calls or any(not (math.isfinite(c.event_us) and math.isfinite(c.host_us)) or c.host_us < 0 or
                        c.event_us < 0 or (c.kind != "null" and (c.event_us <= 0 or c.host_us <= 0)) for c in calls):
        return "non-positive or non-finite time reported"
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


def judge_estimate(calls) -> tuple[float, list[float]]:
    """(median, per-call list) of the judge's own estimate of each timed call on rotated inputs:
    its bracket minus the median bracket of the calls that did nothing."""
    nulls = [c.window_us for c in calls if c.kind == "null"]
    empty = statistics.median(nulls) if nulls else 0.0
    each = [c.window_us - empty for c in calls if c.kind in ("first", "repeat")]
    return (statistics.median(each) if each else math.nan), each


def forged_time_problem(claimed_us: float, judged_us: float, interpreted: bool) -> str | None:
    """The worker's median against the judge's own estimate of the same calls."""
    c = int(interpreted)
    if judged_us > JUDGE_RATIO[c] * claimed_us + JUDGE_SLACK_US[c]:
        return (f"the worker reported {claimed_us:.1f} us per call, the judge's own clock saw about {judged_us:.1f} us: "
                "the reported times are not what happened")
    return None


def side_work_problem(events: list[float], hosts: list[float], idle_gap_us: float) -> str | None:
    """On the GPU: the synchronised host clock saw work the timed stream's events did not."""
    ev = statistics.median(events)
    excess = statistics.median(h - e for e, h in zip(events, hosts)) - min(max(idle_gap_us, 0.0), IDLE_GAP_CAP_US)
    if excess > max(GAP_SLACK_US, GAP_SHARE * ev):
        return (f"about {excess:.1f} us per call ran outside the timed stream (event time {ev:.1f} us): "
                "work on a side stream or thread was not counted")
    return None


def caching_problem(calls, typical_us: float, interpreted: bool) -> str | None:
    """Calls on never-seen inputs much slower than calls on inputs regenerated the same way:
    results cached by content. Compared twice, on the worker's numbers and on the judge's brackets."""
    fresh = [c for c in calls if c.kind == "fresh"]
    again = [c for c in calls if c.kind == "again"]
    if not fresh or not again:
        return "timing covered no fresh and regenerated inputs"
    c = int(interpreted)
    seen_ev, new_ev = statistics.median(x.event_us for x in again), min(x.event_us for x in fresh)
    seen_w, new_w = statistics.median(x.window_us for x in again), min(x.window_us for x in fresh)
    if new_ev > CACHE_RATIO[c] * seen_ev + CACHE_SLACK_US[c] or \
            new_w - seen_w > (CACHE_RATIO[c] - 1) * max(typical_us, 0.0) + CACHE_WINDOW_SLACK_US[c]:
        return (f"calls on inputs seen before took {seen_ev:.1f} us ({seen_w:.1f} us by the judge's clock), "
                f"on fresh inputs at least {new_ev:.1f} us ({new_w:.1f} us): results are being reused across calls")
    return None


def floor_problem(time_us: float, floor_us: float) -> str | None:
    if floor_us and time_us < floor_us:
        return f"impossible time {time_us:.2f} us: below the physical floor of {floor_us:.2f} us"
    return None
