"""The judge reading a worker's memory itself (trusted side; Linux, host memory only).

Anything the worker sends was produced by code that runs next to the candidate, which can
rewire it. A tensor in host memory need not be sent at all: the judge copies its bytes straight
out of the worker's address space with `process_vm_readv`, at a moment the judge chooses, so no
method of the candidate's objects and no harness code runs between the call's return and the
read. The worker says only where the output lies (address, shape, strides, dtype); pointing the
judge elsewhere gains nothing, since whatever bytes are there are compared with the judge's own
answer. The kernel allows the read because the judge is the worker's ancestor and the same user
(under Yama's default ptrace scope too); where it refuses, `read_tensor` returns None and the
caller falls back to the worker's own copy.

Every read has a deadline. A page the worker registered with userfaultfd (or any mapping whose
fault never resolves) makes `process_vm_readv` wait for ever, in uninterruptible sleep, on a
worker that is frozen. So each read runs in a thread of its own that the judge abandons when its
deadline passes (`Stuck`); killing the worker then releases the thread.
"""

from __future__ import annotations

import ctypes
import threading

import torch

from kscience.evaluate.wire import DTYPES


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_readv = getattr(_libc, "process_vm_readv", None)
if _readv is not None:
    _readv.restype = ctypes.c_ssize_t
    _readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
                       ctypes.c_ulong, ctypes.c_ulong]


READ_S = 5.0  # every read may take this long, plus its bytes at READ_BYTES_PER_S
READ_BYTES_PER_S = 100e6  # far below what process_vm_readv copies on any machine the judge runs on


class Stuck(Exception):
    """A read of the worker's memory did not return by its deadline."""


def _copy_out(pid: int, ptr: int, span: int) -> bytearray | None:
    """`span` bytes at `ptr` in process `pid`, or None; may block for ever (see the module's doc)."""
    buf = bytearray(span)
    local = _IoVec(ctypes.addressof((ctypes.c_char * span).from_buffer(buf)), span)
    remote = _IoVec(ptr, span)
    return buf if _readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) == span else None


def _within_deadline(pid: int, ptr: int, span: int) -> bytearray | None:
    """`_copy_out` in an abandonable thread; raises Stuck once its deadline passed."""
    box: list = []

    def read() -> None:
        try:
            box.append(_copy_out(pid, ptr, span))
        except Exception:  # noqa: BLE001 -- an unreadable address is the caller's None
            box.append(None)

    limit = READ_S + span / READ_BYTES_PER_S
    reader = threading.Thread(target=read, name="kscience-peek", daemon=True)
    reader.start()
    reader.join(limit)
    if reader.is_alive():
        raise Stuck(f"reading {span:,} bytes of the worker's memory did not finish in {limit:.3g} s: "
                    "the candidate's memory blocks readers")
    return box[0] if box else None


def read_tensor(pid: int, where: dict, max_bytes: int) -> torch.Tensor | None:
    """The tensor described by `where` ({"ptr", "shape", "strides", "dtype"}, as the worker
    reported it), copied out of process `pid`'s memory now; None if it cannot be read. Raises
    Stuck when the read did not return in time."""
    dtype = DTYPES.get(str(where.get("dtype")))
    shape, strides, ptr = where.get("shape"), where.get("strides"), where.get("ptr")
    if _readv is None or dtype is None or type(ptr) is not int or not isinstance(shape, list) or \
            not isinstance(strides, list) or len(shape) != len(strides) or \
            not all(type(x) is int and x >= 0 for x in shape + strides):
        return None
    itemsize = torch.empty((), dtype=dtype).element_size()
    if 0 in shape:
        return torch.empty(shape, dtype=dtype)
    span = (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * itemsize
    if span > max_bytes or ptr <= 0:
        return None
    buf = _within_deadline(pid, ptr, span)
    if buf is None:
        return None
    flat = torch.frombuffer(buf, dtype=torch.uint8).view(dtype)
    return torch.as_strided(flat, shape, strides).clone()


def can_read(pid: int) -> bool:
    """Whether the kernel lets this process read `pid`'s memory: one byte of its first readable
    mapping, found without asking the worker anything. Raises Stuck when the read did not return in time."""
    if _readv is None:
        return False
    try:
        with open(f"/proc/{pid}/maps") as f:
            start = next(int(line.split("-", 1)[0], 16) for line in f if line.split()[1].startswith("r"))
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    return _within_deadline(pid, start, 1) is not None
