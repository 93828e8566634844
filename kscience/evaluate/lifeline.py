"""A process's lifeline: how everything it starts learns that it died, however it died.

Each process that starts others (a command, a slot's judge, a worker's reaper) holds the write
end of one pipe, which no child inherits; the children it starts get the read end. The kernel
closes the write end when the process ends - SIGKILL and a crash included - so each child sees
end-of-file and ends itself and what it started. A parent-death signal (PR_SET_PDEATHSIG) would
fire when the *thread* that started the child ends, so a pool thread's exit would kill a slot;
a pipe belongs to the process.

Names of what a process leaves on disk or in the cgroup tree carry its owner tag (pid and start
time: a recycled pid is not the same owner; and PID namespace), so a later process can tell what
a dead one left.
"""

from __future__ import annotations

import contextlib
import os
import threading

_pipe: tuple[int, int] | None = None
_pipe_pid: int | None = None
_lock = threading.Lock()


def start_ticks(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot; None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def owner_tag() -> str:
    """This process as an owner: "PID.START.PIDNS", unique for as long as the machine runs (a
    process of another PID namespace, a container sharing TMPDIR, has a tag of its own)."""
    return f"{os.getpid()}.{start_ticks(os.getpid())}.{_pid_namespace()}"


def parse_tag(tag: str) -> tuple[int, int, int] | None:
    """(pid, start, PID namespace) of an owner tag; None for text that is not one."""
    parts = tag.split(".")
    return tuple(int(p) for p in parts) if len(parts) == 3 and all(p.isdigit() for p in parts) else None


def owner_alive(tag: str) -> bool:
    """Whether the process a tag names may still run: it does here (not a zombie, not a recycled
    pid), or it belongs to another PID namespace, where this process cannot tell."""
    pid, start, namespace = parse_tag(tag) or (0, 0, 0)
    if namespace != _pid_namespace():
        return True
    if start_ticks(pid) != start:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def read_end() -> int:
    """The read end of this process's lifeline, to pass (pass_fds) to a child that must die with it."""
    global _pipe, _pipe_pid
    with _lock:
        if _pipe is None or _pipe_pid != os.getpid():
            _pipe, _pipe_pid = os.pipe(), os.getpid()  # both ends close-on-exec: pass_fds opens one
        return _pipe[0]


def _forget_in_child() -> None:
    """A forked child (a notebook's multiprocessing) must not hold its parent's write end open."""
    global _pipe, _pipe_pid
    if _pipe is not None:
        for fd in _pipe:
            with contextlib.suppress(OSError):
                os.close(fd)
    _pipe, _pipe_pid = None, None


os.register_at_fork(after_in_child=_forget_in_child)


def wait_for_end(fd: int) -> None:
    """Return once the process holding the other end of `fd` is gone."""
    while True:
        try:
            if not os.read(fd, 1):
                return
        except InterruptedError:
            continue
        except OSError:
            return


def watch(fd: int, on_death) -> threading.Thread:
    """Call `on_death()` in a thread once the process holding the other end of `fd` is gone."""
    def wait():
        wait_for_end(fd)
        on_death()

    thread = threading.Thread(target=wait, name="kscience-lifeline", daemon=True)
    thread.start()
    return thread
