"""Kill a kscience command and look for what it left: shared by tests/test_lifetime.py (CPU) and
tests/gpu/test_gpu_lifetime.py.

Each command runs with a TMPDIR of its own, so its processes (commands, slot judges, guardians,
workers, whatever a candidate starts) are those whose environment names that folder, and what
it leaves on disk is what that folder's sandbox folder still holds. Its cgroups carry the owner tags of its
sandbox folders' names (kscience.evaluate.sandbox.leftovers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kscience.evaluate.sandbox.cgroup import Cgroup
from kscience.evaluate.sandbox.leftovers import CGROUP_PREFIX, FOLDER_PREFIX, sandbox_root

ROOT = Path(__file__).resolve().parents[1]
GONE_WITHIN_S = 10.0  # after the kill, everything of the command must be gone by then

HANGING = """
def custom_kernel(data):
    while True:
        pass
"""

# Appended to an honest kernel: from its second call on (the first timed one, after the shape's
# check) it says so with a file in its sandbox, where the test sees it, and runs slowly.
SLOW_AFTER_CHECK = """
import time as _time

_honest, _calls = custom_kernel, [0]


def custom_kernel(data):
    _calls[0] += 1
    if _calls[0] == 2:
        open("timing.started", "w").close()
    if _calls[0] >= 2:
        _time.sleep(0.05)
    return _honest(data)
"""


def signal_mask(pid: int, field: str) -> set[int]:
    """The signals in one mask of /proc/PID/status: `SigIgn` (ignored) or `SigCgt` (handled)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(f"{field}:"))
    mask = int(line.split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


def processes_using(tmp: Path) -> dict[int, str]:
    """Every process whose environment has TMPDIR inside `tmp`: the command's whole tree."""
    marker = f"TMPDIR={tmp}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if any(v.startswith(marker) for v in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")):
                found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except OSError:
            continue
    return {p: c for p, c in found.items() if _state(p) not in ("Z", None)}


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class Command:
    """A kscience command started with its own TMPDIR, to be killed and then searched for leftovers.

    It starts with SIGINT at its default, as a command typed at a terminal has it, whatever the
    suite inherited: under `nohup make test &` or a script, SIGINT comes ignored (the shell's
    protection of a background job) and a command left to inherit that never sees the test's
    Ctrl-C. `sigint=signal.SIG_IGN` starts it as such a background job instead."""

    def __init__(self, tmp_path: Path, *args: str, env: dict | None = None,
                 sigint: signal.Handlers = signal.SIG_DFL):
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir(exist_ok=True)
        self.owners: set[str] = set()
        full_env = dict(os.environ, TMPDIR=str(self.tmp), PYTHONPATH=str(ROOT), **(env or {}))
        # A session of its own, as a command started in a terminal has: Ctrl-C goes to its group.
        self.proc = subprocess.Popen([sys.executable, "-m", "kscience", *args], cwd=tmp_path, env=full_env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))

    def sandboxes(self) -> list[Path]:
        found = list(sandbox_root(self.tmp).glob(f"{FOLDER_PREFIX}*"))
        self.owners |= {d.name[len(FOLDER_PREFIX):].split("-", 1)[0] for d in found}
        return found

    def wait_for(self, condition, timeout_s: float = 120.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(f"the command ended before {what}: {self.proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout_s} s")
            time.sleep(0.05)

    def wait_for_worker(self, timeout_s: float = 120.0) -> None:
        """Until a worker's sandbox exists (the judge has started a worker: imports, checks, timing)."""
        self.wait_for(lambda: self.sandboxes(), timeout_s, "sandbox folder")

    def wait_for_timing(self, timeout_s: float = 120.0) -> None:
        """Until a candidate built on SLOW_AFTER_CHECK is in its timed calls."""
        self.wait_for(lambda: any((d / "timing.started").exists() for d in self.sandboxes()), timeout_s,
                      "timed call")

    def kill(self, sig: int) -> tuple[int, str]:
        """Send `sig` to the command (SIGINT to its process group, as a terminal's Ctrl-C does);
        return its exit code and stderr once it ended."""
        self.sandboxes()
        if sig == signal.SIGINT:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"the command outlived {signal.Signals(sig).name} by 60 s: {err[-2000:]}")
        return self.proc.returncode, err

    def assert_nothing_left(self) -> None:
        """No process, sandbox folder or cgroup of the command within GONE_WITHIN_S."""
        deadline = time.monotonic() + GONE_WITHIN_S
        while True:
            procs, folders = processes_using(self.tmp), self.sandboxes()
            groups = [n for n in Cgroup.named(CGROUP_PREFIX) if any(f"-{o}-" in n for o in self.owners)]
            if not (procs or folders or groups):
                return
            if time.monotonic() > deadline:
                for pid in procs:  # leave nothing running for the next test, then fail
                    os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"left behind after {GONE_WITHIN_S} s: processes {procs}, "
                                     f"folders {[f.name for f in folders]}, cgroups {groups}")
            time.sleep(0.1)
