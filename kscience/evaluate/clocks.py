"""The clocks a call is timed with, on both sides: the worker times every call of the candidate
with them, and the judge times a problem's own reference the same way (judge/reference_outside.py).

A timed region is covered: a cache flush and a short GPU spin are queued before its start event, so
launch latency stays out of the event time, and the host clock starts when the GPU reaches the
region (`reached`), not when it was submitted. Synchronisation spins rather than sleeps while a
region is timed. The worker binds these names before the candidate runs, and its integrity check
watches this module as it watches the worker's own (worker/integrity.py).
"""

from __future__ import annotations

import contextlib
import gc
import time

import torch

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
# The same device-wide wait without the Python wrapper, whose own time (longer while the host's CPU is
# slow) would land in every region's host time after its end event.
_device_synchronize = getattr(torch._C, "_cuda_synchronize", _synchronize)
_query = torch.cuda.Event.query
CPU_THREADS_VAR = "KSCIENCE_CPU_THREADS"  # an interpreter slot's share of the cores, for its judge and workers

_CU_CTX_SCHED_SPIN = 0x01
_CU_CTX_SCHED_MASK = 0x07
_SCHED_NAMES = {0: "auto", 1: "spin", 2: "yield", 4: "blocking"}


def flush_bytes(l2_bytes: int) -> int:
    """Size of the buffer overwritten before every timed call: twice the L2, at least 256 MB."""
    return max(l2_bytes * 2, 256 * 2**20)


def cuda_driver():
    """The NVIDIA driver library, or None (ROCm, or no driver library to talk to)."""
    import ctypes

    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def spin_while_waiting(context_exists: bool) -> None:
    """Make synchronisation spin rather than sleep. A sleeping host thread wakes tens of
    microseconds late after long kernels, which would blur the comparison of host and event
    times that exposes work hidden on side streams. Set on the primary context before it is
    created, and again on the current context once it exists (drivers that allow it)."""
    import ctypes

    cuda = cuda_driver()
    device = ctypes.c_int()
    if cuda is None:
        return
    if not context_exists and cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0:
        cuda.cuDevicePrimaryCtxSetFlags(device, ctypes.c_uint(_CU_CTX_SCHED_SPIN))
    if context_exists and hasattr(cuda, "cuCtxSetFlags"):
        cuda.cuCtxSetFlags(ctypes.c_uint(_CU_CTX_SCHED_SPIN))


@contextlib.contextmanager
def spinning():
    """Synchronisation that spins for the duration, then waits as it did before: for a trusted
    process (the judge) that times a call as a worker does, without changing how it waits otherwise."""
    import ctypes

    cuda, flags = cuda_driver(), ctypes.c_uint()
    if cuda is None or not hasattr(cuda, "cuCtxSetFlags") or cuda.cuCtxGetFlags(ctypes.byref(flags)) != 0:
        yield
        return
    cuda.cuCtxSetFlags(ctypes.c_uint((flags.value & ~_CU_CTX_SCHED_MASK) | _CU_CTX_SCHED_SPIN))
    try:
        yield
    finally:
        cuda.cuCtxSetFlags(flags)


def waiting_mode() -> str:
    """How the current context's host threads wait for the GPU, as the driver reports it."""
    import ctypes

    cuda, flags = cuda_driver(), ctypes.c_uint()
    if cuda is None or not hasattr(cuda, "cuCtxGetFlags") or cuda.cuCtxGetFlags(ctypes.byref(flags)) != 0:
        return "unknown"
    return _SCHED_NAMES.get(flags.value & _CU_CTX_SCHED_MASK, "unknown")


IDLE_SAMPLES = 25
# After the flush the GPU spins this many cycles more (about 0.15 ms at 2 GHz) before a timed call's
# start event: the flush alone (tens of microseconds on HBM3) is shorter than a Python launch on a
# busy host, and any launch time not covered lands inside the event time (timing.Timer.timed_call).
COVER_CYCLES = 300_000
# Before a region's first event the GPU spins this many cycles (about 0.1 ms at 2 GHz), so the event
# runs while the host is already watching for it (`reached`) instead of during its own submission. The
# host clock then starts when the GPU reaches the region, not before the host's Python submitted it:
# that Python time follows the host CPU's speed, which varies by the second, and it is no work of the
# call's (docs/evaluation.md has the figures).
LEAD_CYCLES = 200_000
gpu_spin = getattr(torch.cuda, "_sleep", None)  # a kernel that busy-waits for a number of GPU cycles


def reached(event, submitted: float) -> float:
    """The host clock's start for a region whose first GPU work is `event`, recorded at `submitted`:
    the moment of the last look that found the GPU had not reached it yet.

    A GPU shared with other processes runs their contexts in turn, and a region can wait milliseconds
    for its turn before its first event runs. A host clock started at submission counts that wait as
    the call's; started here it counts only what happened once the GPU took the region up. It starts
    no later than the host learns the event ran; beside busy processes it now and then learns that a
    time slice late, so `timing.Timer.timed_call` never reports less than the event time
    (docs/evaluation.md, "Why the evaluator is as it is", has the figures)."""
    last = submitted
    while True:
        looked = _perf_counter()
        if _query(event):
            return last
        last = looked


def covered_region(flush: torch.Tensor, call) -> tuple[float, float, object]:
    """(event us, host us, what `call()` returned) of one region on the GPU, as every timed call
    and the idle gap are measured.

    The cache flush, then a short spin, are queued just before the start event (the flush as
    `triton.testing.do_bench` does), so the GPU is busy while the host launches the call and
    launch latency stays out of the event time. The host clock starts when the GPU reaches the
    flush (`reached`: not while other processes' time slices hold the GPU), and the flush and
    spin, measured by their own events, are taken out of the host time, which otherwise spans
    them, the call and a device-wide synchronisation (work hidden on side streams lands inside).
    """
    before, start, end = (_Event(enable_timing=True) for _ in range(3))
    if gpu_spin is not None:
        gpu_spin(LEAD_CYCLES)
    h0 = _perf_counter()
    before.record()
    flush.zero_()
    if gpu_spin is not None:
        gpu_spin(COVER_CYCLES)
    h0 = reached(before, h0)
    start.record()
    out = call()
    end.record()
    _device_synchronize()
    host = (_perf_counter() - h0) * 1e6 - before.elapsed_time(start) * 1e3
    event = start.elapsed_time(end) * 1e3
    # Beside other processes the host now and then learns that the GPU reached `before` a time
    # slice after the event's own timestamp, so its clock starts late. It cannot have waited less
    # than the GPU ran the call.
    return event, max(host, event), out


def idle_gap_us(flush: torch.Tensor) -> float:
    """Host time minus event time of an empty covered region (median of IDLE_SAMPLES): what the
    two clocks disagree by around a call that does nothing. Measured with the cover every timed
    call has: the cover adds its own disagreement (tens of microseconds on an H100), and honest
    seeds weighed against a gap measured without it came near the side-work allowance."""
    gaps = []
    for _ in range(IDLE_SAMPLES):
        _synchronize()
        event, host, _ = covered_region(flush, lambda: None)
        gaps.append(host - event)
    return sorted(gaps)[len(gaps) // 2]


def settle_garbage_collector() -> None:
    """Everything alive now moves out of the collector's reach. A full collection walks every
    object in the process, and torch.compile leaves hundreds of thousands (443,000 after compiling
    one sort on a CPU, where a full collection then took 1.1 s): one landing in a judge's bracket
    adds its pause to that call alone, and the judge's estimate, a difference of brackets, swings
    with it. Objects made later are still collected; the worker is thrown away after one evaluation."""
    gc.freeze()
