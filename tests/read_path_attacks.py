"""Hostile candidates for the judge's read of a timed output (tests/adversarial/test_read_path.py,
tests/gpu/test_gpu_attacks.py): each returns unwritten memory from timed calls and has the answer
computed while the output is read."""

from pathlib import Path

# The running harness, found by walking up from the candidate's call, and whether this call is timed.
FIND = """
import sys
from kscience.evaluate.worker.harness import Harness

def _harness():
    f = sys._getframe(1)
    while f is not None:
        o = f.f_locals.get("self")
        for h in (o, getattr(o, "h", None)):
            if type(h) is Harness:
                return h
        f = f.f_back

def _timed():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "timed_call":
            return True
        if f.f_code.co_name == "check":
            return False
        f = f.f_back
    return False
"""

# Timed calls return zeros; the harness's `sync`, replaced on the instance, writes the answer into
# whatever the harness holds for the judge: the moment the judge asks the worker for the bytes.
ANSWER_IN_SYNC = FIND + """
_saved = []

def _answer_then_sync(h):
    def sync():
        if _saved and h.held and tuple(h.held[0].shape) == tuple(_saved[0].shape):
            h.held[0].copy_(honest(_saved[0]))
    return sync

def custom_kernel(data):
    (x,) = data
    if not _timed():
        _saved.clear()
        return honest(x)
    h = _harness()
    _saved[:] = [x.clone()]
    try:
        h.sync = _answer_then_sync(h)
    except AttributeError:  # the instance takes no attribute of its own
        pass
    return torch.zeros_like(x)
"""

# As above, and the output packing, replaced on the instance, hands the judge a tensor that says it
# lies on another device, so the judge asks the worker for it instead of reading the memory itself.
ANSWER_ELSEWHERE = ANSWER_IN_SYNC + """
class _Elsewhere(torch.Tensor):
    @property
    def device(self):
        return torch.device("meta")

def custom_kernel(data, _plain=custom_kernel):
    out = _plain(data)
    if _timed():
        try:
            _harness().pack_output = lambda o, max_bytes: None if o is None else o.as_subclass(_Elsewhere)
        except AttributeError:
            pass
    return out
"""

# Timed calls return a tensor over memory registered with userfaultfd (missing pages, no handler):
# any read of it waits for ever, the judge's own `process_vm_readv` included. Prints USERFAULTFD
# UNAVAILABLE and stays honest where the sandbox cannot create a full userfaultfd.
USERFAULTFD = """
import ctypes
import mmap
import os

_SYSCALL = {"x86_64": 323, "aarch64": 282}.get(os.uname().machine)
_UFFDIO_API, _UFFDIO_REGISTER, _MODE_MISSING = 0xC018AA3F, 0xC020AA00, 1
_libc = ctypes.CDLL(None, use_errno=True)
_keep = []

def _blocking_memory(nbytes):
    fd = _libc.syscall(_SYSCALL, os.O_CLOEXEC) if _SYSCALL else -1
    if fd < 0:
        return None
    api = (ctypes.c_uint64 * 3)(0xAA, 0, 0)
    region = mmap.mmap(-1, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
    start = ctypes.addressof(ctypes.c_char.from_buffer(region))
    register = (ctypes.c_uint64 * 4)(start, len(region), _MODE_MISSING, 0)
    if _libc.ioctl(fd, _UFFDIO_API, api) or _libc.ioctl(fd, _UFFDIO_REGISTER, register):
        return None
    _keep.append((fd, region))
    return region

def custom_kernel(data):
    (x,) = data
    if not _timed():
        return honest(x)
    region = _blocking_memory(x.numel() * x.element_size())
    if region is None:
        print("USERFAULTFD UNAVAILABLE", flush=True)
        return honest(x)
    return torch.frombuffer(region, dtype=x.dtype, count=x.numel()).view(x.shape)
"""

# The harness's integrity check switched off and its timer replaced, from inside the candidate's call:
# `_replace_timer(fn)` with fn(self, run) -> (event us, host us, output), `_real` the harness's own.
REPLACE_TIMER = """
import gc

import kscience.evaluate.worker.timing as T
from kscience.evaluate.worker.harness import Harness

_real = T.Timer.timed_call


def _replace_timer(replacement):
    gc.unfreeze()  # what the worker froze is hidden from get_objects
    for o in gc.get_objects():
        if type(o) is Harness:
            o.verify = lambda: None
    T.Timer.timed_call = replacement
"""

# Honest work with every timed reply forged (tests/data/json_forgery.py).
JSON_FORGERY = (Path(__file__).parent / "data" / "json_forgery.py").read_text()
