"""A judge process per evaluation slot: `python -m kscience.evaluate.executors.slot IN_FD OUT_FD`.

The judge's host work (drawing inputs, computing answers, reading outputs from the worker's
pipe, comparing) is Python holding the GIL. With every slot's judge in one process, slots
queued behind each other for it, so two GPUs gave 1.6x, not 2x (benchmarks/results/README.md).
Here each slot owns a long-lived trusted process that runs `judge.evaluation.evaluate` and keeps its own spare
worker, so slots share nothing but the machine. The process imports torch once; an
evaluation costs only a request and a result, both plain JSON, on a private pair of pipes.

The slot process is as trusted as the judge: it is this package's own code, and it sees only
requests from its parent. A process that dies (the OOM killer, a kill by hand) is replaced
and its evaluation run again once; a second loss is a "crashed" result, never a hang.

A slot process ends with its parent: it watches the parent's lifeline (lifeline.py) and, the
parent gone however it went, kills its workers and exits. SIGTERM (its parent's `interrupt_all`,
on the parent's Ctrl-C or SIGTERM) or SIGINT end the evaluation in flight unjudged: its worker
is killed, nothing is sent back, and the parent gets no verdict for it but an
`EvaluationInterrupted`, so the candidate stays pending for a resume.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

from kscience.evaluate import lifeline
from kscience.evaluate.clocks import CPU_THREADS_VAR
from kscience.evaluate.executors.carried import judged_here
from kscience.evaluate.result import CRASHED, EvalRequest, EvalResult
from kscience.evaluate.sandbox.spares import close_all
from kscience.problems import ProblemError


def _visibility(gpu: int | None) -> dict:
    """The slot's process sees only its own GPU, as device 0: its CUDA context can land nowhere else."""
    if gpu is None:
        return {}
    import torch

    var = "HIP_VISIBLE_DEVICES" if torch.version.hip else "CUDA_VISIBLE_DEVICES"
    inherited = [d.strip() for d in os.environ.get(var, "").split(",") if d.strip()]
    return {var: inherited[gpu] if gpu < len(inherited) else str(gpu)}


INTERRUPTED_EXIT = 130  # a slot process stopped by SIGINT or SIGTERM
_started: "weakref.WeakSet[JudgeProcess]" = weakref.WeakSet()


class EvaluationInterrupted(RuntimeError):
    """The slot was told to stop (a signal) while it judged: the evaluation has no verdict."""


def interrupt_all() -> None:
    """Tell every slot process of this process to stop now (what Ctrl-C does to the process group)."""
    for judge in list(_started):
        proc = judge._proc
        if proc is not None and proc.poll() is None:
            judge._interrupted = True
            proc.send_signal(signal.SIGTERM)


class JudgeProcess:
    """One slot's trusted process. `evaluate` is called by one thread at a time (the slot's)."""

    def __init__(self, gpu: int | None, cpu_threads: int | None = None):
        self.gpu = gpu
        self.cpu_threads = cpu_threads  # torch's CPU threads for this slot's judge and workers (CPU slots)
        self._proc: subprocess.Popen | None = None
        self._conn_in: Connection | None = None
        self._conn_out: Connection | None = None
        self._lock = threading.Lock()
        self._interrupted = False
        self.doing: str | None = None  # what the judge says it is doing in the evaluation under way

    def _start(self) -> None:
        to_child, from_child = os.pipe(), os.pipe()
        package_parent = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ, **_visibility(self.gpu))
        if self.cpu_threads:
            env[CPU_THREADS_VAR] = str(self.cpu_threads)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "kscience.evaluate.executors.slot", str(to_child[0]), str(from_child[1]),
             "none" if self.gpu is None else "0", str(lifeline.read_end())],
            # Its chatter (library warnings) goes to stderr: stdout may carry a command's JSON.
            env=env, stdin=subprocess.DEVNULL, stdout=2, close_fds=True,
            pass_fds=(to_child[0], from_child[1], lifeline.read_end()),
            # Its own process group: a terminal's Ctrl-C reaches the parent alone, which decides
            # (`interrupt_all`); one landing while this process imports would print a traceback.
            process_group=0)
        _started.add(self)
        os.close(to_child[0])
        os.close(from_child[1])
        self._conn_out = Connection(to_child[1], readable=False)
        self._conn_in = Connection(from_child[0], writable=False)

    def _ask(self, request: EvalRequest) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            self._close_pipes()
            self._start()
        self._conn_out.send_bytes(json.dumps(dataclasses.asdict(request)).encode())
        try:
            while True:  # what the judge is doing, said as it changes, then the reply
                message = json.loads(self._conn_in.recv_bytes())
                if set(message) != {"doing"}:
                    return message
                self.doing = str(message["doing"])
        finally:
            self.doing = None

    def evaluate(self, request: EvalRequest) -> EvalResult:
        with self._lock:
            for attempt in (1, 2):
                try:
                    reply = self._ask(request)
                    break
                except (EOFError, OSError):
                    code = self._reap()
                    if self._interrupted or code in (INTERRUPTED_EXIT, -signal.SIGINT, -signal.SIGTERM):
                        self._interrupted = False
                        raise EvaluationInterrupted("the evaluation was interrupted (SIGINT or SIGTERM)") from None
                    if attempt == 2:
                        return EvalResult(status=CRASHED, message=f"the judge process of this slot died twice "
                                                                  f"(last exit code {code})")
        if "problem_error" in reply:
            raise ProblemError(reply["problem_error"])
        if "error" in reply:
            raise RuntimeError(f"the judge failed: {reply['error']}")
        return EvalResult.from_dict(reply["result"])

    def _reap(self) -> int | None:
        self._close_pipes()
        if self._proc is None:
            return None
        self._proc.kill()
        code = self._proc.wait()
        self._proc = None
        return code

    def _close_pipes(self) -> None:
        for conn in (self._conn_in, self._conn_out):
            if conn is not None:
                conn.close()
        self._conn_in = self._conn_out = None

    def close(self) -> None:
        """End the process: it sees the pipe close, closes its spare and exits."""
        with self._lock:
            self._close_pipes()
            if self._proc is not None:
                try:
                    self._proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None


def _stop(*_) -> None:
    raise KeyboardInterrupt


def _parent_gone() -> None:
    close_all()
    os._exit(1)


def serve(conn_in: Connection, conn_out: Connection, gpu: int | None, parent_lifeline: int) -> None:
    from kscience.evaluate.judge.evaluation import evaluate, judging_process

    lifeline.watch(parent_lifeline, _parent_gone)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        judging_process(int(os.environ.get(CPU_THREADS_VAR, 0)) or None)
        _serve(conn_in, conn_out, gpu, evaluate)
    except (KeyboardInterrupt, BrokenPipeError) as stop:  # the evaluation in flight ends unjudged
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        close_all()
        os._exit(INTERRUPTED_EXIT if isinstance(stop, KeyboardInterrupt) else 1)  # BrokenPipe: the parent left


def _serve(conn_in: Connection, conn_out: Connection, gpu: int | None, evaluate) -> None:
    while True:
        try:
            request = EvalRequest(**json.loads(conn_in.recv_bytes()))
        except EOFError:
            return  # the executor shut down; atexit closes this slot's spare worker
        try:
            said = lambda doing: conn_out.send_bytes(json.dumps({"doing": doing}).encode())  # noqa: E731
            reply = {"result": evaluate(judged_here(request), gpu=gpu, keep_spare=True, on_phase=said).to_dict()}
        except ProblemError as exc:
            reply = {"problem_error": str(exc)}
        except Exception as exc:  # a bug in the judge: the caller raises it, as it would in-process
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        conn_out.send_bytes(json.dumps(reply).encode())


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False),
          None if sys.argv[3] == "none" else int(sys.argv[3]), int(sys.argv[4]))
