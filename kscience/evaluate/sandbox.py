"""Starting, watching and killing an untrusted worker process (the trusted side).

Layers, each cheap and needing no service: a new session and process group (one kill
ends everything the candidate started); a scrubbed environment with HOME, TMPDIR and the
working directory in a throw-away folder; no inherited descriptors except the channel,
which the worker moves to unpredictable numbers; an RSS watchdog (RLIMIT_AS would break
CUDA contexts, which reserve huge address ranges); a random token in the environment that
finds processes which left the group; and, where the kernel allows unprivileged user
namespaces, new network, PID and mount namespaces (no network, the trusted process is
invisible in the worker's /proc, and every process of the namespace dies with the worker).
Writes outside the sandbox are blocked inside the worker with Landlock (see confine.py).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kscience.evaluate import compile_facts
from kscience.evaluate.wire import Channel
from kscience.redact import SECRET_NAME, redact

# Variables a worker may inherit: what Python, compilers and GPU runtimes need, nothing else.
_KEEP = re.compile(r"^(PATH|LANG|LC_[A-Z]+|TZ|LD_LIBRARY_PATH|CUDA_HOME|CUDA_PATH|ROCM_PATH|HIP_PATH|"
                   r"HIP_PLATFORM|CC|CXX|TORCH_CUDA_ARCH_LIST|PYTORCH_ROCM_ARCH|TRITON_INTERPRET|"
                   r"TRITON_[A-Z_]*ARCH[A-Z_]*|NCCL_[A-Z_]+|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS|"
                   r"KSCIENCE_DEVICE|PYTHONPATH)$")
TAIL_BYTES = 4096


def cache_root() -> Path:
    """Persistent caches shared by workers (Triton kernels, load_inline builds) so warm runs are fast."""
    root = Path(os.environ.get("KSCIENCE_CACHE", Path.home() / ".cache" / "kscience"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def worker_env(workdir: Path, gpu: int | None, interpreted: bool, token: str) -> dict:
    env = {k: v for k, v in os.environ.items() if _KEEP.match(k) and not SECRET_NAME.search(k)}
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    env.update(HOME=str(workdir), TMPDIR=str(workdir), PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1", KSCIENCE_EVAL_TOKEN=token,
               TRITON_CACHE_DIR=str(cache_root() / "triton"),
               TORCH_EXTENSIONS_DIR=str(cache_root() / "torch_extensions"))
    if not interpreted:  # the worker records the Triton cache entries it uses: its compile facts
        env.update(compile_facts.recording_env(workdir))
    if interpreted:
        env["TRITON_INTERPRET"] = "1"
        env["KSCIENCE_DEVICE"] = "cpu"
    elif gpu is not None:
        import torch

        # `gpu` indexes the GPUs this process sees; under an inherited visibility list (a Ray task,
        # CUDA_VISIBLE_DEVICES=2,3) that index must become the physical id the list names.
        var = "HIP_VISIBLE_DEVICES" if torch.version.hip else "CUDA_VISIBLE_DEVICES"
        inherited = [d.strip() for d in os.environ.get(var, "").split(",") if d.strip()]
        env[var] = inherited[gpu] if gpu < len(inherited) else str(gpu)
    return env


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether `unshare` can give an unprivileged worker its own user, network, PID and mount namespaces."""
    if os.environ.get("KSCIENCE_SANDBOX_NAMESPACES", "1") == "0" or not shutil.which("unshare"):
        return False
    try:
        return subprocess.run(_unshare_prefix() + ["true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _unshare_prefix() -> list[str]:
    return ["unshare", "--user", "--map-current-user", "--net", "--pid", "--fork", "--mount-proc",
            "--kill-child"]


class _Tail(threading.Thread):
    """Drains a pipe forever (a flood cannot block the worker) and keeps only the last bytes."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.buf, self.total = stream, bytearray(), 0

    def run(self):
        for chunk in iter(lambda: self.stream.read1(65536), b""):
            self.total += len(chunk)
            self.buf += chunk
            del self.buf[:-TAIL_BYTES]

    def text(self) -> str:
        s = self.buf.decode(errors="replace")
        return (f"[{self.total - len(self.buf)} earlier bytes dropped]\n" if self.total > len(self.buf) else "") + s


class Worker:
    """A disposable worker process: `channel` talks to it; `close()` kills it and everything it started."""

    def __init__(self, gpu: int | None, interpreted: bool, rss_limit_bytes: int):
        self.workdir = Path(tempfile.mkdtemp(prefix="kscience-eval-"))
        self.token = secrets.token_hex(16)
        self.killed_for: str | None = None
        self.triton_keys: list[str] = []  # the Triton cache entries it used, read when it is closed
        ours, theirs = os.pipe(), os.pipe()  # trusted->worker, worker->trusted
        cmd = [sys.executable, "-m", "kscience.evaluate.worker", str(ours[0]), str(theirs[1])]
        self.namespaced = namespaces_available()
        if self.namespaced:
            cmd = _unshare_prefix() + cmd
        self.proc = subprocess.Popen(
            cmd, cwd=self.workdir, env=worker_env(self.workdir, gpu, interpreted, self.token),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(ours[0], theirs[1]), start_new_session=True, close_fds=True)
        os.close(ours[0])
        os.close(theirs[1])
        self.channel = Channel(theirs[0], ours[1], nonblocking=True)
        self.stdout, self.stderr = _Tail(self.proc.stdout), _Tail(self.proc.stderr)
        self.stdout.start()
        self.stderr.start()
        self._stop = threading.Event()
        self._rss_limit = rss_limit_bytes
        self._watchdog: threading.Thread | None = None

    def watch(self) -> None:
        """Start the RSS watchdog. A spare waiting for its job runs only kscience's own code, so
        it is watched from when it is taken: each scan reads every process's /proc entry."""
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch_memory, daemon=True)
            self._watchdog.start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _group_pids(self) -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if int(fields[2]) == self.proc.pid:  # process group id == the worker session leader
                    pids.append(int(entry))
        return pids

    def _rss_bytes(self) -> int:
        total = 0
        for pid in self._group_pids():
            try:
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError):
                continue
        return total

    def _watch_memory(self):
        while not self._stop.wait(0.1):
            rss = self._rss_bytes()
            if rss > self._rss_limit:
                self.kill(f"host memory cap exceeded ({rss / 2**30:.1f} GiB > {self._rss_limit / 2**30:.1f} GiB)")
                return

    def kill(self, reason: str | None = None) -> None:
        if reason and not self.killed_for:
            self.killed_for = reason
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._kill_escapees()

    def _kill_escapees(self) -> None:
        """Processes that left the group (setsid, double fork) still carry the evaluation token."""
        marker = f"KSCIENCE_EVAL_TOKEN={self.token}".encode()
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                try:
                    if marker in Path(f"/proc/{entry}/environ").read_bytes():
                        os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    continue

    def exit_description(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "worker stopped answering"
        if self.namespaced and 128 < code < 128 + signal.NSIG:
            code = 128 - code  # the namespace's first process reports a signal as 128 + its number
        if code < 0:
            try:
                return f"worker killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"worker killed by signal {-code}"
        return f"worker exited with code {code}"

    def close(self) -> None:
        self._stop.set()
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL was sent; do not hang on a zombie
            self.proc.wait(timeout=10)
        self.channel.close()
        self.stdout.join(timeout=2)
        self.stderr.join(timeout=2)
        self.triton_keys = compile_facts.recorded_keys(self.workdir / compile_facts.RECORD_FILE) or []
        shutil.rmtree(self.workdir, ignore_errors=True)

    def tails(self) -> tuple[str, str]:
        return redact(self.stdout.text()), redact(self.stderr.text())


def default_rss_limit() -> int:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(os.environ.get("KSCIENCE_WORKER_RSS_BYTES", min(32 * 2**30, total // 2)))


# One worker started in advance per evaluation slot: its Python and torch imports, about three
# seconds of every evaluation, then overlap the evaluation before it. It touches no GPU until its
# job arrives. On an H100 its start still made the evaluation beside it 1.6-2.7 s slower, for a
# reason not yet found (benchmarks/results/README.md), so the saving is real but partial.
_spares: dict[tuple, Worker] = {}
_spares_lock = threading.Lock()


def start_worker(gpu: int | None, interpreted: bool, rss_limit_bytes: int, keep_spare: bool = False) -> Worker:
    """A fresh worker for one evaluation: the spare started for this slot if it is still alive,
    else a new one. With `keep_spare`, the next evaluation's spare starts now."""
    key = (gpu, interpreted, rss_limit_bytes)
    with _spares_lock:
        worker = _spares.pop(key, None)
    if worker is None or not worker.alive():
        if worker is not None:
            worker.close()
        worker = Worker(gpu, interpreted, rss_limit_bytes)
    worker.watch()
    if keep_spare:
        spare = Worker(gpu, interpreted, rss_limit_bytes)
        with _spares_lock:
            old = _spares.pop(key, None)
            _spares[key] = spare
        if old is not None:
            old.close()
    return worker


@atexit.register
def close_spares() -> None:
    with _spares_lock:
        spares = list(_spares.values())
        _spares.clear()
    for worker in spares:
        worker.close()
