"""What a candidate can reach from its sandbox: no memory that outlives its evaluation, no
userfaultfd, nothing of other sandboxes, the queue or the run database to read."""

from __future__ import annotations

import textwrap

import pytest

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.evaluate.sandbox import workers
from kscience.evaluate.worker import confine
from kscience.problems import load_problem

pytestmark = pytest.mark.skipif(not workers.namespaces_available(),
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


SNOOP = """
import os
_readable, _unreadable = {readable!r}, {unreadable!r}
for _path in _unreadable:
    try:
        if os.path.isdir(_path):
            os.listdir(_path)
        else:
            open(_path, "rb").read()
    except PermissionError:
        continue
    raise RuntimeError(f"read {{_path}}")
for _path in _readable:
    open(_path, "rb").read()  # what is not hidden stays readable: a problem file beside the database
"""


def test_a_candidate_reads_no_other_sandbox_queue_or_database(tmp_path, monkeypatch):
    """Another sandbox's source, the sandboxes' folder, a queue's pending request and the run
    database are unreadable; a file beside the database is not."""
    from kscience.evaluate.sandbox.leftovers import folder_prefix, sandbox_root

    sibling = sandbox_root() / f"{folder_prefix()}sibling"  # a live owner's: no command removes it meanwhile
    sibling.mkdir(exist_ok=True)
    (sibling / "candidate.py").write_text("SECRET = 1\n")
    queue = tmp_path / "queue"
    (queue / "requests").mkdir(parents=True)
    (queue / "requests" / "r.json").write_text('{"nonce": "secret"}')
    (tmp_path / "k.db").write_bytes(b"SQLite format 3\0")
    (tmp_path / "problem.py").write_text("x = 1\n")
    monkeypatch.delenv(confine.UNREADABLE_VAR, raising=False)
    workers.hide_from_workers(queue, tmp_path / "k.db")
    try:
        unreadable = [str(sibling / "candidate.py"), str(sandbox_root()), str(queue / "requests" / "r.json"),
                      str(queue), str(tmp_path / "k.db")]
        result = judged(SNOOP.format(readable=[str(tmp_path / "problem.py")], unreadable=unreadable))
    finally:
        (sibling / "candidate.py").unlink()
        sibling.rmdir()
    assert result.status == "ok", result.message
    assert "reads" in str(result.confinement), result.confinement
