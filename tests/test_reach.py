"""What a candidate can reach from its sandbox: no memory that outlives its evaluation, no
userfaultfd, nothing of other sandboxes, the queue or the run database to read."""

from __future__ import annotations

import textwrap

import pytest

from kscience.evaluate import sandbox
from kscience.evaluate.judge import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.problems import load_problem

pytestmark = pytest.mark.skipif(not sandbox.namespaces_available(),
                                reason="needs unprivileged user/PID/IPC namespaces (unshare) for the sandboxed worker")


def judged(prefix: str, **fields):
    source = textwrap.dedent(prefix) + load_problem("softmax").seed_source
    return evaluate(EvalRequest(problem="softmax", source=source, shapes="tests", **fields))


SHM_COUNTER = """
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
_KEY, _IPC_CREAT = 0x4B5343, 0o1000
if _libc.shmget(_KEY, 0, 0o600) >= 0:  # a segment an earlier evaluation left
    raise RuntimeError("found the segment of an earlier evaluation")
assert _libc.shmget(_KEY, 1 << 20, _IPC_CREAT | 0o600) >= 0, ctypes.get_errno()
"""


def _host_shm_keys() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[0]) for line in f.read().splitlines()[1:] if line.split()}


def test_shared_memory_does_not_outlive_an_evaluation():
    """A private IPC namespace: a keyed System V segment is gone with its evaluation, so nothing
    the host can see stays and no count can be kept across evaluations."""
    for _ in range(2):
        result = judged(SHM_COUNTER)
        assert result.status == "ok", result.message
        assert 0x4B5343 not in _host_shm_keys()


USERFAULTFD = """
import ctypes, fcntl, os, platform
_libc = ctypes.CDLL(None, use_errno=True)
_UFFD_USER_MODE_ONLY = 1  # what an unprivileged process may still ask for
_nr = {"x86_64": 323, "aarch64": 282}[platform.machine()]
if _libc.syscall(_nr, os.O_CLOEXEC | _UFFD_USER_MODE_ONLY) >= 0:
    raise RuntimeError("userfaultfd(2) gave a descriptor")
try:
    _dev = os.open("/dev/userfaultfd", os.O_RDONLY | os.O_CLOEXEC)
except OSError:
    _dev = None
if _dev is not None:
    try:
        fcntl.ioctl(_dev, 0xAA00, os.O_CLOEXEC | _UFFD_USER_MODE_ONLY)  # USERFAULTFD_IOC_NEW
    except OSError:
        pass
    else:
        raise RuntimeError("/dev/userfaultfd gave a descriptor")
"""


def test_no_userfaultfd_in_the_sandbox():
    """Neither the system call nor the device: memory whose faults the candidate serves could hang
    the judge's reads of worker memory."""
    result = judged(USERFAULTFD)
    assert result.status == "ok", result.message
    assert "seccomp (no userfaultfd)" in str(result.confinement), result.confinement
