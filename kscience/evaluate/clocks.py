"""How the worker's side times a call on the GPU (`gpu_region`), and how a process waits for the GPU.

The figure that counts is the judge's own clock around each command (judge/drive.py); the worker's
CUDA events and host clock are advice that refines it where they agree (judge/measure.py).
Synchronisation spins rather than sleeps, so the moment a call's work ends reaches the host, and the
judge's clock, without a wake-up's delay. The worker binds these names before the candidate runs,
and its integrity check watches this module as it watches the worker's own (worker/integrity.py).
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
CPU_THREADS_VAR = "KSCIENCE_CPU_THREADS"  # an interpreter slot's share of the cores, for its judge and workers

_CU_CTX_SCHED_SPIN = 0x01
_CU_CTX_SCHED_MASK = 0x07
_SCHED_NAMES = {0: "auto", 1: "spin", 2: "yield", 4: "blocking"}


def flush_bytes(l2_bytes: int) -> int:
    """Size of the buffer the judge overwrites before every timed call: twice the L2, at least 256 MB
    (the size Triton's `do_bench` flushes)."""
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
    """Synchronisation that spins for the duration, then waits as it did before: for the judge, which
    waits for its own work inside its clock around every timed call, without changing how it waits otherwise."""
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


def gpu_region(call) -> tuple[float, float, object]:
    """(event us, host us, what `call()` returned) of one call on the GPU: CUDA events on the current
    stream around it, and the host clock from just before the start event to the end of a device-wide
    synchronisation (work left on other streams lands in the host time). The judge's own clock around
    the whole command is the figure that counts (judge/measure.py); these refine it where they agree."""
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    h0 = _perf_counter()
    start.record()
    out = call()
    end.record()
    _device_synchronize()
    host = (_perf_counter() - h0) * 1e6
    return start.elapsed_time(end) * 1e3, host, out


def settle_garbage_collector() -> None:
    """Everything alive now moves out of the collector's reach. A full collection walks every
    object in the process, and torch.compile leaves hundreds of thousands (443,000 after compiling
    one sort on a CPU, where a full collection then took 1.1 s): one landing in a judge's bracket
    adds its pause to that call alone, and the judge's estimate, a difference of brackets, swings
    with it. Objects made later are still collected; the worker is thrown away after one evaluation."""
    gc.freeze()
