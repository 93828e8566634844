"""What a judge leaves when it dies, and who removes it (the trusted side).

A judge's workers name their sandbox folders `kscience-eval-OWNER-...` (in one folder per user in
TMPDIR, `sandbox_root()`, which candidates cannot read: see confine.py) and their cgroups
`kscience-OWNER-...`, and carry `KSCIENCE_EVAL_OWNER=OWNER` in their environment, where OWNER
is the judge's owner tag (lifeline.py). Two removers use that:

* the judge's guardian, a small process started with its first worker in a session of its own
  (a signal to the judge's process group does not reach it): it waits on the judge's lifeline
  and, the moment the judge is gone (SIGKILL and crashes included), thaws and kills the judge's
  cgroups and processes and deletes its folders, then exits;
* every command that evaluates, at its start: whatever an owner that no longer runs left (its
  guardian killed with it, a machine that lost power), said in one line.

The workers' own reapers watch the same lifeline and end their process trees themselves; the
guardian is what reaches a tree frozen by the judge, the cgroups and the folders.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kscience.evaluate import lifeline, proctree
from kscience.evaluate.sandbox.cgroup import Cgroup

FOLDER_PREFIX = "kscience-eval-"
CGROUP_PREFIX = "kscience-"
OWNER_VAR = "KSCIENCE_EVAL_OWNER"

_guardian: tuple[int, subprocess.Popen] | None = None  # (pid of the judge it guards, the guardian)


def sandbox_root(tmp: Path | None = None) -> Path:
    """The folder in TMPDIR (or `tmp`) that holds every sandbox folder of this user, private to
    the user. It stays when empty: another process may be about to make a sandbox in it."""
    root = Path(tmp or tempfile.gettempdir()) / f"kscience-sandboxes-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    return root


def folder_prefix() -> str:
    return f"{FOLDER_PREFIX}{lifeline.owner_tag()}-"


def cgroup_name(token: str) -> str:
    return f"{CGROUP_PREFIX}{lifeline.owner_tag()}-{token}"


def _owner(name: str, prefix: str) -> str | None:
    """The owner tag in a leftover's name; None for a name this scheme did not make."""
    tag = name[len(prefix):].split("-", 1)[0] if name.startswith(prefix) else ""
    return tag if lifeline.parse_tag(tag) else None


def _is_left(tag: str | None, owner: str | None) -> bool:
    return tag is not None and (tag == owner if owner else not lifeline.owner_alive(tag))


def _processes_of(owners: set[str]) -> set[int]:
    """Processes whose environment names one of `owners` (where no cgroup lists a worker's)."""
    markers = [f"{OWNER_VAR}={tag}\0".encode() for tag in owners]
    found = set()
    for pid in proctree.table():
        with contextlib.suppress(OSError):
            env = Path(f"/proc/{pid}/environ").read_bytes()
            if any(m in env for m in markers):
                found.add(pid)
    return found


def reclaim(owner: str | None = None) -> list[str]:
    """Remove what `owner` left, or with no owner what every owner that no longer runs left:
    processes (thawed and killed), cgroups, sandbox folders. Returns one phrase per thing removed."""
    removed = []
    groups = {name: g for name, g in Cgroup.named(CGROUP_PREFIX).items()
              if _is_left(_owner(name, CGROUP_PREFIX), owner)}
    folders = [d for d in sandbox_root().glob(f"{FOLDER_PREFIX}*")
               if _is_left(_owner(d.name, FOLDER_PREFIX), owner)]
    owners = {_owner(n, CGROUP_PREFIX) for n in groups} | {_owner(d.name, FOLDER_PREFIX) for d in folders}
    owners |= {owner} if owner else set()
    for _ in range(3 if owners else 0):  # a process forking while it is killed leaves a child: look again
        pids = _processes_of(owners) - {os.getpid()}
        if not pids:
            break
        proctree.signal_all(pids, signal.SIGKILL)
        removed.append(f"{len(pids)} process(es)")
        time.sleep(0.05)
    for name, group in groups.items():
        if group.pids():
            removed.append(f"{len(group.pids())} process(es) in cgroup {name}")
        group.kill()  # thaws a frozen group so that its members can die
        group.remove()
        removed.append(f"cgroup {name}")
    for d in folders:
        shutil.rmtree(d, ignore_errors=True)
        removed.append(f"folder {d}")
    return removed


def reclaim_and_say(say) -> None:
    """At a command's start: remove what dead kscience processes left, in one line if anything."""
    with contextlib.suppress(OSError):
        removed = reclaim()
        if removed:
            say(f"kscience: removed what a stopped kscience process left: {', '.join(removed)}")


def guard() -> None:
    """Start this process's guardian unless it runs (once per process; a fork needs its own)."""
    global _guardian
    if _guardian and _guardian[0] == os.getpid() and _guardian[1].poll() is None:
        return
    fd = lifeline.read_end()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[3]), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, "-m", "kscience.evaluate.sandbox.leftovers", str(fd), lifeline.owner_tag()],
                            env=env, pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)
    _guardian = (os.getpid(), proc)


def _guardian_main(fd: int, owner: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the judge is the judge's to handle
    lifeline.wait_for_end(fd)
    reclaim(owner)


if __name__ == "__main__":
    _guardian_main(int(sys.argv[1]), sys.argv[2])
