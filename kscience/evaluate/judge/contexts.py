"""Whether processes other than the judge and the worker hold contexts on a GPU (the trusted side).

Beside other processes a GPU runs their contexts in turn, and each of the judge's brackets waits
for their time slices, by milliseconds that vary from call to call: its estimate of a call swings
by as much, and the forged-time check allows the spread of the round's null brackets for it
(`crosscheck.forged_time_problem`). A candidate can spread those brackets by itself, though: a
worker that stops waiting for its GPU leaves each call's work queued into the calls after it
(a kernel of 5.8 ms can be reported as 1.1 ms that way). So the spread is allowed only where the
driver lists a context that belongs neither to the judge nor to the worker's processes: a contention
the candidate cannot have made, since everything it starts stays among the worker's processes
(`proctree`).

NVML lists the contexts of every process on the device, in any container, under the host's process
ids, which need not be ours: so its count is what is used, and the judge's and the worker's own
contexts are counted here, through /proc: each of those processes that has an NVIDIA device file
open counts as one (a context needs them open; a process of the worker's that opened one without a
context makes the count of others lower, never higher). Where NVML cannot answer (no NVIDIA driver
library, a ROCm device) the answer is None, and the judge allows no spread.
"""

from __future__ import annotations

import ctypes
import functools
import os

_INSUFFICIENT_SIZE = 7  # NVML_ERROR_INSUFFICIENT_SIZE: the count is set, the list not filled


@functools.lru_cache(maxsize=1)
def _nvml():
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        return lib if lib.nvmlInit_v2() == 0 else None
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=None)
def _device(gpu: int):
    """The NVML handle of this process's CUDA device `gpu`, or None."""
    lib = _nvml()
    if lib is None:
        return None
    import torch

    if torch.version.hip or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(gpu)
    handle = ctypes.c_void_p()
    uuid = str(getattr(props, "uuid", ""))
    found = bool(uuid) and lib.nvmlDeviceGetHandleByUUID(
        (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}").encode(), ctypes.byref(handle)) == 0
    if not found and hasattr(props, "pci_bus_id"):
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        found = lib.nvmlDeviceGetHandleByPciBusId_v2(bus.encode(), ctypes.byref(handle)) == 0
    return handle if found else None


def listed(gpu: int) -> int | None:
    """How many processes hold a compute context on `gpu`, by the driver's count; None if unknown."""
    dev = _device(gpu)
    if dev is None:
        return None
    count = ctypes.c_uint(0)
    rc = _nvml().nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), None)
    return count.value if rc in (0, _INSUFFICIENT_SIZE) else None


def holds(pid: int, prefix: str = "/dev/nvidia") -> bool:
    """Whether process `pid` has a file open whose path starts with `prefix`. A process whose
    descriptors cannot be read counts as holding one (the count of others then comes out lower:
    the stricter judgement)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except FileNotFoundError:
            continue
        except OSError:
            return True
    return False


def others(gpu: int, worker_pids: set[int]) -> int | None:
    """Contexts on `gpu` held by processes other than this one and `worker_pids`; None if unknown."""
    total = listed(gpu)
    if total is None:
        return None
    return max(total - sum(holds(pid) for pid in worker_pids | {os.getpid()}), 0)
