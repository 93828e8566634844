"""What a problem's own reference shows outside its timed stream (the trusted side).

The side-work check (`crosscheck.side_work_problem`) reads the worker's device-synchronised host
clock against its CUDA events: time the events did not see is work hidden beside the timed stream.
Some honest calls show such a difference by themselves: on an H100 GPU MODE's pmpp sort solutions,
`torch.sort` eager or compiled, show 16-20% of their event time outside, over the check's 15%, on
every round. So where a round raises that doubt the judge times the task's reference on the same
shape in its own process, as a worker times a call (the cache flush, the spin, events, a
device-wide synchronisation), and allows what the reference showed: a candidate may hide beside its
stream no more than the trusted reference shows honestly.
"""

from __future__ import annotations

import statistics

import torch

from kscience.evaluate import clocks

CALLS = 7  # timed calls of the reference, after one untimed


def outside_us(problem, data: list, l2_bytes: int) -> float:
    """Median host time minus event time of the reference's calls on `data`, beyond the idle gap
    measured the same way just before (never below zero). Zero where the GPU has no room left for
    the reference beside the candidate's worker: the doubt then stands as it was."""

    def call():
        return problem.ref_kernel(problem.call_data(data))

    try:
        flush = torch.empty(clocks.flush_bytes(l2_bytes) // 4, dtype=torch.int32, device="cuda")
        with clocks.spinning():
            call()
            gap = clocks.idle_gap_us(flush)
            figures = [clocks.covered_region(flush, call)[:2] for _ in range(CALLS)]
    except torch.cuda.OutOfMemoryError:
        return 0.0
    return max(statistics.median(host - event for event, host in figures) - gap, 0.0)
