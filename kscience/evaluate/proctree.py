"""Every process a worker started, as the kernel records it (the trusted side, plus the reaper).

A candidate can leave the process group (`setsid`), shed its environment and double-fork so its
parent dies; none of that moves it out of a cgroup, and with a subreaper above it (the worker's
reaper, or PID 1 of its namespace) its orphans stay below that reaper in the parent links of
/proc. So the trusted side finds the worker's processes in two independent ways:

* a cgroup per worker where this machine lets us make one (v2 with a delegated memory and pids
  controller, else the v1 memory, pids and freezer hierarchies): membership the candidate cannot
  leave (Landlock makes cgroupfs read-only to it), a memory cap and a process cap the kernel
  enforces on the whole tree, and a freezer;
* the descendants of the worker's first process, by walking parent links in /proc.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time


def _read(path: str) -> str:
    """A small /proc file in one read: the judge reads thousands per evaluation (pathlib's
    read_text costs several times as much)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, parent pid, process group, start time in clock ticks), or None if it is gone."""
    try:
        fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def table(pids=None) -> dict[int, tuple[str, int, int, int]]:
    """The state, parent, group and start time of the given processes, or of every one in /proc."""
    if pids is None:
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    procs = {}
    for pid in pids:
        if (st := _stat(pid)) is not None:
            procs[pid] = st
    return procs


def descendants(roots, procs: dict | None = None) -> set[int]:
    """The roots that still exist and every process below them."""
    procs = table() if procs is None else procs
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [r for r in roots if r in procs]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def below(root: int) -> set[int]:
    """`root` and every process below it, from the kernel's per-thread children lists: reads
    only the tree, not all of /proc. A process forked during the walk may be missed; callers
    that must not miss one walk again until nothing new appears."""
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        found.add(pid)
        for tid in tids:
            with contextlib.suppress(OSError, ValueError):
                todo.extend(int(c) for c in _read(f"/proc/{pid}/task/{tid}/children").split())
    return found


def children_lists() -> bool:
    """Whether this kernel keeps /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)."""
    return os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def eldest_child(pid: int, procs: dict | None = None) -> int | None:
    """The child of `pid` started first; None when it has none or two started in the same tick."""
    procs = table() if procs is None else procs
    kids = sorted((st[3], p) for p, st in procs.items() if st[1] == pid)
    if not kids or (len(kids) > 1 and kids[0][0] == kids[1][0]):
        return None
    return kids[0][1]


def stopped(pid: int) -> bool:
    st = _stat(pid)
    return st is None or st[0] in "TtZX"  # gone, stopped, traced or dead all count as not running


def signal_all(pids, sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_children_until_none() -> None:
    """The reaper's last act: SIGKILL every process below this one and reap them all.
    As a subreaper (or PID 1) every orphan of the worker is below it, whatever session it is in."""
    me = os.getpid()
    while True:
        signal_all(descendants([me]) - {me}, signal.SIGKILL)
        try:
            os.wait()
        except ChildProcessError:
            return


def wait_stopped(pids, timeout_s: float = 2.0) -> bool:
    """Whether every process in `pids` is stopped (SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while not all(stopped(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
