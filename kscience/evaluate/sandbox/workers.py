"""Starting, watching, freezing and killing an untrusted worker process (the trusted side).

Layers, each cheap and needing no service: a new session and process group; a reaper above
the worker that adopts every orphan (`setsid` and double forks included) and kills them when
the worker ends; where this machine allows, a cgroup per worker (cgroup.py: kernel-enforced
memory and process caps on the whole tree, a freezer, an exact member list), else an RSS
watchdog over the whole tree (RLIMIT_AS would break CUDA contexts, which reserve huge address
ranges); a scrubbed environment with HOME, TMPDIR, the working directory and the compile caches
in a throw-away folder (compile_cache.py); no inherited descriptors except the channel, which
the worker moves to unpredictable numbers; a random token in the environment; and, where the
kernel allows unprivileged user namespaces, new network, PID, mount and IPC namespaces (no
network, no System V IPC or POSIX message queue shared with the host or outliving the worker,
the trusted process is invisible in the worker's /proc, and every process of the namespace
dies with the worker). Writes outside the sandbox, and reads of other sandboxes, kept compile
caches, the run's database and a queue folder, are blocked inside the worker with Landlock, and
userfaultfd with seccomp (see confine.py). `Worker.confinement()` says which of these were in
force.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path

from kscience.evaluate import lifeline, proctree
from kscience.evaluate.profile import compile_facts
from kscience.evaluate.sandbox import compile_cache, leftovers
from kscience.evaluate.sandbox.cgroup import Cgroup
from kscience.evaluate.wire import Channel, widen_pipe
from kscience.evaluate.worker import confine
from kscience.redact import SECRET_NAME, redact

# Variables a worker may inherit: what Python, compilers and GPU runtimes need, nothing else.
_KEEP = re.compile(r"^(PATH|LANG|LC_[A-Z]+|TZ|LD_LIBRARY_PATH|CUDA_HOME|CUDA_PATH|ROCM_PATH|HIP_PATH|"
                   r"HIP_PLATFORM|CC|CXX|TORCH_CUDA_ARCH_LIST|PYTORCH_ROCM_ARCH|TRITON_INTERPRET|"
                   r"TRITON_[A-Z_]*ARCH[A-Z_]*|NCCL_[A-Z_]+|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS|"
                   r"KSCIENCE_DEVICE|KSCIENCE_CPU_THREADS|PYTHONPATH)$")
TAIL_BYTES = 4096
MAX_PIDS = int(os.environ.get("KSCIENCE_WORKER_MAX_PIDS", 4096))  # processes and threads, where a cgroup caps them


def hide_from_workers(*paths) -> None:
    """Keep `paths` (a run's database, a queue folder) out of every worker's reach from now on, this
    process's and its slot processes' (they inherit the environment)."""
    known = [p for p in os.environ.get(confine.UNREADABLE_VAR, "").split(os.pathsep) if p]
    both = dict.fromkeys(known + [os.path.abspath(p) for p in paths])
    os.environ[confine.UNREADABLE_VAR] = os.pathsep.join(both)


def unreadable() -> list[str]:
    """What a worker may not read: every sandbox (its own is let back in as writable), the kept
    compile caches of other sources, and what the commands hid (`hide_from_workers`)."""
    hidden = [p for p in os.environ.get(confine.UNREADABLE_VAR, "").split(os.pathsep) if p]
    return [str(leftovers.sandbox_root()), str(compile_cache.store_root())] + hidden


def worker_env(workdir: Path, gpu: int | None, interpreted: bool, token: str) -> dict:
    env = {k: v for k, v in os.environ.items() if _KEEP.match(k) and not SECRET_NAME.search(k)}
    package_parent = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    env.update(HOME=str(workdir), TMPDIR=str(workdir), PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1", KSCIENCE_EVAL_TOKEN=token, **compile_cache.private_dirs(workdir))
    # torch.compile's inductor otherwise compiles in a pool of one process per core that it starts
    # at the candidate's first call and that goes on starting while the calls are timed: host noise
    # the judge reads as side work or a forged clock. Compiling in the worker keeps timing alone.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    if interpreted:
        env["TRITON_INTERPRET"] = "1"
        env["KSCIENCE_DEVICE"] = "cpu"
        # torch.compile runs its function as written: Dynamo cannot trace the interpreter's launches
        # (GPU MODE's pmpp vectorsum, a compiled Triton launch, failed in its fake tensors), and code
        # compiled for the CPU says nothing about the GPU kernel under test.
        env["TORCHDYNAMO_DISABLE"] = "1"
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
    return ["unshare", "--user", "--map-current-user", "--net", "--pid", "--ipc", "--fork", "--mount-proc",
            "--kill-child"]


def weak_points() -> list[str]:
    """The confinement layers an evaluation needs that this machine cannot give a worker."""
    missing = []
    if confine.landlock_abi() < 1:
        missing.append("Landlock (the candidate could write anywhere the user can)")
    if not namespaces_available():
        missing.append("user/PID/network namespaces (the judge's process and environment visible, network open)")
    return missing


def weak_confinement_allowed() -> bool:
    """Whoever runs the evaluator said it may run with layers missing (`--unconfined`)."""
    return os.environ.get("KSCIENCE_ALLOW_WEAK_CONFINEMENT", "0") == "1"


_live: "weakref.WeakSet[Worker]" = weakref.WeakSet()  # every worker of this process not yet closed


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
        leftovers.guard()  # before anything exists that a killed judge would leave behind
        self.workdir = Path(tempfile.mkdtemp(prefix=leftovers.folder_prefix(), dir=leftovers.sandbox_root()))
        self.token = secrets.token_hex(16)
        self.killed_for: str | None = None
        self.cache_entry: str | None = None
        self.interpreted = interpreted
        self.slot = (gpu, interpreted, rss_limit_bytes)  # which evaluations may take it as their worker
        self.compile_facts: list = []  # what its compilers built, read from its private cache on close
        ours, theirs = os.pipe(), os.pipe()  # trusted->worker, worker->trusted
        for fd in (ours[1], theirs[0]):
            widen_pipe(fd)
        watched = lifeline.read_end()  # the reaper ends the worker's tree when this process ends
        # Descriptors the judge hands over (shared_buffer.py) travel on a socket of their own.
        self.fd_socket, their_socket = socket.socketpair()
        self.fd_socket.setblocking(False)
        cmd = [sys.executable, "-m", "kscience.evaluate.worker", str(ours[0]), str(theirs[1]), str(watched),
               str(their_socket.fileno())]
        self.namespaced = namespaces_available()
        if self.namespaced:
            cmd = _unshare_prefix() + cmd
        self.cgroup = Cgroup.create(leftovers.cgroup_name(self.token[:16]), rss_limit_bytes, MAX_PIDS)
        if self.cgroup:  # join before anything else runs, so no child is ever outside it
            cmd = ["/bin/sh", "-c", 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97; shift; done; shift; '
                   'exec "$@"', "sh", *self.cgroup.procs_files, "--", *cmd]
        env = dict(worker_env(self.workdir, gpu, interpreted, self.token), **{
            leftovers.OWNER_VAR: lifeline.owner_tag(), confine.UNREADABLE_VAR: os.pathsep.join(unreadable())})
        self.proc = subprocess.Popen(
            cmd, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(ours[0], theirs[1], watched, their_socket.fileno()), start_new_session=True, close_fds=True)
        _live.add(self)
        os.close(ours[0])
        os.close(theirs[1])
        their_socket.close()
        self.channel = Channel(theirs[0], ours[1], nonblocking=True)
        self.stdout, self.stderr = _Tail(self.proc.stdout), _Tail(self.proc.stderr)
        self.stdout.start()
        self.stderr.start()
        self._stop = threading.Event()
        self._rss_limit = rss_limit_bytes
        self._watchdog: threading.Thread | None = None
        self._stopped: set[int] = set()
        self._serving: int | None = None  # see serving_pid

    def confinement(self) -> dict:
        """The layers the trusted side put in place itself (Landlock is reported by the worker)."""
        return {"namespaces": "user, net, pid, ipc, mount" if self.namespaced else "off",
                "cgroup": self.cgroup.describe() if self.cgroup else "off",
                "reaper": "pid 1 of the namespace" if self.namespaced else "subreaper",
                "memory_cap": "cgroup" if self.cgroup else "watchdog over the process tree",
                "env_filter": "allow-list", "compile_cache": "private per evaluation"}

    def watch(self) -> None:
        """Start the RSS watchdog where no cgroup caps memory. A spare waiting for its job runs
        only kscience's own code, so it is watched from when it is taken."""
        if self._watchdog is None and self.cgroup is None:
            self._watchdog = threading.Thread(target=self._watch_memory, daemon=True)
            self._watchdog.start()

    def alive(self) -> bool:
        return self.proc.poll() is None

    # --- the process tree --------------------------------------------------------------------
    def pids(self, thorough: bool = False) -> set[int]:
        """Every process of the worker. With a cgroup, its members: the candidate cannot leave
        it. Without, everything below the first process: the reaper adopts orphans, so `setsid`
        and double forks stay below it. `thorough` (when killing) takes both, the process group,
        and whatever carries the evaluation token, with what is below those; it reads every
        process's environment, tens of milliseconds on a busy host."""
        if not thorough and (self.cgroup or proctree.children_lists()):
            members = self.cgroup.pids() if self.cgroup else proctree.below(self.proc.pid)
            return {p for p, st in proctree.table(members).items() if st[0] != "Z"}  # zombies hold nothing
        procs = proctree.table()
        roots = {self.proc.pid} | (self.cgroup.pids() if self.cgroup else set())
        roots |= {pid for pid, (_, _, pgid, _) in procs.items() if pgid == self.proc.pid}
        if thorough:
            marker = f"KSCIENCE_EVAL_TOKEN={self.token}".encode()
            for pid in procs.keys() - roots - {os.getpid()}:
                with contextlib.suppress(OSError):
                    if marker in Path(f"/proc/{pid}/environ").read_bytes():
                        roots.add(pid)
        return {p for p in proctree.descendants(roots, procs) if procs[p][0] != "Z"}  # zombies hold nothing

    def serving_pid(self) -> int | None:
        """The process that runs the harness and answers the channel: the reaper's first child
        (anything else below the reaper was started later, by the candidate). Found once: it
        answers until the evaluation ends, and the judge asks before every read."""
        if self._serving is None:
            procs = proctree.table(self.pids() | {self.proc.pid})
            reaper = proctree.eldest_child(self.proc.pid, procs) if self.namespaced else self.proc.pid
            self._serving = proctree.eldest_child(reaper, procs) if reaper else None
        return self._serving

    def freeze(self, keep_serving: bool = False, thorough: bool = False) -> bool:
        """Stop every process of the worker, `setsid` children included; True when all are stopped.
        With `keep_serving` the process answering the channel runs on (its threads too), so it can
        send what the judge asks for while nothing else the candidate started can touch memory."""
        if self.cgroup and self.cgroup.can_freeze and not keep_serving:
            if self.cgroup.freeze(True):
                self._stopped = {-1}
                return True
        spare = self.serving_pid() if keep_serving else None
        # SIGSTOP lands asynchronously: a process may still fork until it is seen stopped. Once
        # all found are stopped, a child forked before that is in the tree, so one more scan
        # that finds nothing new means everything is stopped.
        for _ in range(20):
            todo = self.pids(thorough) - self._stopped - {spare}
            if not todo:
                return True
            proctree.signal_all(todo, signal.SIGSTOP)
            self._stopped |= todo
            proctree.wait_stopped(todo)
        return False

    def thaw(self) -> None:
        if self._stopped == {-1}:
            self.cgroup.freeze(False)
        else:
            proctree.signal_all(self._stopped, signal.SIGCONT)
        self._stopped = set()

    @contextlib.contextmanager
    def frozen(self, keep_serving: bool = False):
        try:
            yield self.freeze(keep_serving)
        finally:
            self.thaw()

    # --- memory ------------------------------------------------------------------------------
    def _rss_bytes(self) -> int:
        total = 0
        for pid in self.pids():  # every 0.1 s: the token scan is left to the kill
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

    def memory_cap_hit(self) -> str | None:
        """Why the worker broke its memory cap, if it did: the watchdog's kill, or the kernel's
        OOM kill of any of its processes inside the cgroup."""
        if self.killed_for:
            return self.killed_for
        if self.cgroup and self.cgroup.oom_kills():
            return (f"host memory cap exceeded (the kernel killed a process of the worker at "
                    f"{self._rss_limit / 2**30:.1f} GiB)")
        return None

    def kill(self, reason: str | None = None) -> None:
        """SIGKILL everything. All of it is stopped first: a process killed before its children
        were found would hand them to init, out of the tree, and a running one could fork."""
        if reason and not self.killed_for:
            self.killed_for = reason
        if self.cgroup:
            self.cgroup.kill()
        self.freeze(thorough=True)
        proctree.signal_all(self.pids(thorough=True) | (self._stopped - {-1}), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.thaw()  # a task in a frozen cgroup dies only once thawed

    def exit_description(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "worker stopped answering"
        if 128 < code < 128 + signal.NSIG:
            code = 128 - code  # the reaper reports a signal as 128 + its number
        if code < 0:
            try:
                return f"worker killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"worker killed by signal {-code}"
        return f"worker exited with code {code}"

    def use_cache(self, entry: str) -> bool:
        """Start this worker's private compile caches from the store's copy for this source."""
        self.cache_entry = entry
        return compile_cache.seed(self.workdir, entry)

    def close(self, keep_cache: bool = False) -> None:
        """Kill everything; with `keep_cache`, the private compile caches go to the store first."""
        self._stop.set()
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL was sent; do not hang on a zombie
            self.proc.wait(timeout=10)
        self.channel.close()
        self.fd_socket.close()
        _live.discard(self)
        self.stdout.join(timeout=2)
        self.stderr.join(timeout=2)
        self.compile_facts = self._compile_facts()
        if self.cgroup:
            self.cgroup.remove()
        if keep_cache and self.cache_entry:
            compile_cache.keep(self.workdir, self.cache_entry)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _compile_facts(self) -> list[dict]:
        """On a GPU, what this evaluation's compilers built (registers, spills, tensor-core use), read
        from its private caches and the folder of its own builds once its processes are gone, with what
        ptxas printed into its output: advice for the scientist, never a verdict."""
        if self.interpreted:
            return []
        dirs = compile_cache.private_dirs(self.workdir)
        return [f.to_dict() for f in compile_facts.collect(
            dirs["TRITON_CACHE_DIR"], dirs["TORCH_EXTENSIONS_DIR"], build_dir=dirs[compile_cache.BUILD_DIR_VAR],
            logs=(self.stdout.text(), self.stderr.text()))]

    def tails(self) -> tuple[str, str]:
        return redact(self.stdout.text()), redact(self.stderr.text())


def default_rss_limit() -> int:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(os.environ.get("KSCIENCE_WORKER_RSS_BYTES", min(32 * 2**30, total // 2)))


def close_every_worker() -> None:
    """Kill every worker of this process not yet closed, thawing what is frozen."""
    for worker in list(_live):
        worker.close()
