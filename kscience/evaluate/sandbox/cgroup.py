"""A cgroup per worker, where this machine lets us make one (the trusted side).

The kernel then enforces the host memory cap and a process cap on every process of the worker,
`setsid` children included, freezes them all at once, and lists them exactly. Two layouts:

* cgroup v2: a child of this process's own cgroup, usable when that cgroup already delegates
  the memory and pids controllers to its children (or can be made to: only a cgroup without
  processes of its own may, so in practice under a systemd-delegated scope or a container root).
* cgroup v1: children of this process's cgroups in the separate memory, pids and freezer
  hierarchies, where those are mounted and writable (typically as root in a container).

Neither is guaranteed; `create` returns None when nothing usable exists, and the sandbox falls
back to its watchdog and the walk of the process tree (see proctree.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from kscience.evaluate.proctree import signal_all

_V1_CONTROLLERS = ("memory", "pids", "freezer")


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, type, options) of every cgroup filesystem."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                found.append((parts[1].replace("\\040", " "), parts[2], set(parts[3].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    paths = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                paths[c] = path
    return paths


def _parents(version: int) -> list:
    """Where this process makes worker cgroups: v2, the directories of its own cgroup; v1,
    (controller, directory) for each of the memory, pids and freezer hierarchies mounted."""
    own, found = _own_paths(), []
    for mount, kind, options in _mounts():
        if version == 2 and kind == "cgroup2" and "" in own:
            found.append(Path(mount + own[""]))
        if version == 1 and kind == "cgroup":
            found += [(c, Path(mount + own[c])) for c in _V1_CONTROLLERS
                      if c in options and c in own and c not in {f[0] for f in found}]
    return found


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


class Cgroup:
    """One worker's cgroup(s): `procs_files` to join at start, caps, freezer, members, removal."""

    def __init__(self, version: int, dirs: dict[str, Path]):
        self.version, self.dirs = version, dirs  # v2: {"": dir}; v1: {controller: dir}

    @classmethod
    def create(cls, name: str, memory_bytes: int, max_pids: int) -> "Cgroup | None":
        if os.environ.get("KSCIENCE_SANDBOX_CGROUP", "1") == "0":
            return None
        for parent in _parents(2):
            group = cls._make_v2(parent, name, memory_bytes, max_pids)
            if group:
                return group
        dirs = {}
        for c, parent in _parents(1):
            d = parent / name
            with contextlib.suppress(OSError):
                d.mkdir()
                dirs[c] = d
        group = cls(1, dirs)
        if "memory" in dirs and not _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes)):
            group.remove()
            return None
        if "memory" in dirs:  # where swap accounting exists, swap must not stretch the cap
            _write(dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
        if "pids" in dirs and not _write(dirs["pids"] / "pids.max", str(max_pids)):
            group.remove()
            return None
        if "memory" not in dirs:
            return group.remove()
        return group

    @classmethod
    def named(cls, prefix: str) -> "dict[str, Cgroup]":
        """The worker cgroups whose names start with `prefix`, as this process would make them
        (a dead judge's, to remove), by name."""
        found: dict[str, Cgroup] = {}
        for parent in _parents(2):
            for d in parent.glob(f"{prefix}*"):
                found.setdefault(d.name, cls(2, {"": d}))
        for c, parent in _parents(1):
            for d in parent.glob(f"{prefix}*"):
                found.setdefault(d.name, cls(1, {})).dirs[c] = d
        return found

    @classmethod
    def _make_v2(cls, parent: Path, name: str, memory_bytes: int, max_pids: int) -> "Cgroup | None":
        enabled = set((parent / "cgroup.subtree_control").read_text().split()) if parent.is_dir() else set()
        if not {"memory", "pids"} <= enabled and not _write(parent / "cgroup.subtree_control", "+memory +pids"):
            return None
        d = parent / name
        try:
            d.mkdir()
        except OSError:
            return None
        group = cls(2, {"": d})
        if not (_write(d / "memory.max", str(memory_bytes)) and _write(d / "pids.max", str(max_pids))):
            return group.remove()
        _write(d / "memory.swap.max", "0")  # where swap exists, it must not stretch the cap
        return group

    def describe(self) -> str:
        if self.version == 2:
            return "v2 (memory, pids, freezer)"
        return f"v1 ({', '.join(c for c in _V1_CONTROLLERS if c in self.dirs)})"

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> set[int]:
        found = set()
        for d in self.dirs.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
        return found

    @property
    def can_freeze(self) -> bool:
        return self.version == 2 or "freezer" in self.dirs

    def freeze(self, frozen: bool, timeout_s: float = 2.0) -> bool:
        """Freeze (or thaw) every member; True once the kernel says it is done."""
        if self.version == 2:
            f, value = self.dirs[""] / "cgroup.freeze", "1" if frozen else "0"
            state = self.dirs[""] / "cgroup.events"
            want = f"frozen {1 if frozen else 0}"
        else:
            f, value = self.dirs["freezer"] / "freezer.state", "FROZEN" if frozen else "THAWED"
            state, want = f, value
        if not _write(f, value):
            return False
        deadline, done = time.monotonic() + timeout_s, False
        while True:
            with contextlib.suppress(OSError):
                done = want in state.read_text()
            if done or time.monotonic() > deadline:
                return bool(done)
            time.sleep(0.001)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for exceeding the memory cap."""
        f = self.dirs[""] / "memory.events" if self.version == 2 else self.dirs["memory"] / "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in f.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def kill(self) -> None:
        """SIGKILL every member. A frozen task dies only once thawed, and a fork racing the kill
        lands in the group, so freeze, kill, thaw until it is empty."""
        if self.version == 2 and _write(self.dirs[""] / "cgroup.kill", "1"):
            return
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            frozen = self.can_freeze and self.freeze(True, timeout_s=0.5)
            signal_all(self.pids(), signal.SIGKILL)
            if frozen:
                self.freeze(False, timeout_s=0.5)
            time.sleep(0.01)

    def remove(self) -> None:
        """Delete the cgroup(s); members that are still exiting get a moment."""
        for d in self.dirs.values():
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        return None
