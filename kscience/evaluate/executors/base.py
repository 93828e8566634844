"""Where evaluations run. The scientist loop only sees `Executor.submit -> Future[EvalResult]`.

`LocalExecutor` keeps one evaluation slot per local GPU: each slot has its own trusted judge
process (`slot.JudgeProcess`, so no two slots share a GIL), which starts a disposable worker
pinned to that slot's GPU (through the device's own visibility variable), so two timings
never share a GPU. The loop keeps `capacity` evaluations in flight, which keeps every slot
busy. Clusters use `kscience.evaluate.executors.ray_cluster`, a GPU reachable only through files
`kscience.evaluate.executors.queue_dir`; `factory.make_executor` picks one from a spec string.
"""

from __future__ import annotations

import os
import queue
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor

from kscience.device import cpu_forced
from kscience.evaluate.executors.slot import JudgeProcess
from kscience.evaluate.result import EvalRequest, EvalResult


class Executor(ABC):
    # Requests submitted together are judged together, and one submitted alone waits a round trip of its own
    # (a queue served by batch jobs): a run then sends optional work with its next evaluation (kscience.run.held).
    batches = False

    @property
    @abstractmethod
    def capacity(self) -> int:
        """How many evaluations can run at once; the loop keeps this many in flight."""

    @abstractmethod
    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        """Start an evaluation. The future never raises for a bad candidate: it holds a status."""

    def shutdown(self) -> None:
        """Release workers; evaluations not yet started are cancelled, running ones finish."""

    def wait_state(self, future: Future) -> str | None:
        """For an evaluation that waits on something outside this process (a queue), what it waits
        for, in a phrase that changes only when the state does; None when it is simply running."""
        return None

    def doing(self, future: Future) -> str | None:
        """What the judge of a running evaluation is doing now ("checking correctness"), where this
        executor hears it; None where it does not (a cluster, a queue) or before the judge starts."""
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


def visible_gpus() -> list[int]:
    """Indices of local GPUs this process may use (CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES apply)."""
    import torch

    if cpu_forced() or not torch.cuda.is_available():
        return []
    return list(range(torch.cuda.device_count()))


def check_positive(name: str, value: int | None) -> None:
    """Worker counts are caps: None means no cap, and a cap below one would run nothing."""
    if value is not None and value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")


class LocalExecutor(Executor):
    """One slot per visible GPU (at most `gpus` of them). Without a GPU, `cpu_workers` slots
    (one by default: interpreted timings use the host clock, and parallel runs would skew it)."""

    def __init__(self, gpus: int | None = None, cpu_workers: int | None = None):
        check_positive("gpus", gpus)
        check_positive("cpu_workers", cpu_workers)
        found = visible_gpus()
        slots: list[int | None] = found[:gpus] if gpus else found
        if not slots:
            slots = [None] * (cpu_workers or 1)
        # A slot is taken for the whole evaluation, so a GPU never hosts two at once; the pool
        # has exactly one thread per slot, so taking a slot never waits.
        # Interpreter slots share the host's cores: each judge and its worker get an even part, or
        # every worker's torch would run a thread per core (8 slots on 16 cores: over a hundred).
        share = None if found else max(1, (os.cpu_count() or 1) // len(slots))
        self._judges = [JudgeProcess(gpu, share) for gpu in slots]  # each starts on its first evaluation
        self._slots: "queue.Queue[JudgeProcess]" = queue.Queue()
        for judge in self._judges:
            self._slots.put(judge)
        self._n = len(slots)
        self._pool = ThreadPoolExecutor(max_workers=self._n, thread_name_prefix="kscience-eval")
        self._held: dict[Future, list[JudgeProcess]] = {}

    @property
    def capacity(self) -> int:
        return self._n

    def _run(self, request: EvalRequest, held: list) -> EvalResult:
        judge = self._slots.get()
        held.append(judge)
        try:
            # The loop evaluates one candidate after another: each slot keeps its next worker ready.
            return judge.evaluate(request)
        finally:
            held.clear()
            self._slots.put(judge)

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        held: list[JudgeProcess] = []  # the slot judging this request, while it does
        future = self._pool.submit(self._run, request, held)
        self._held[future] = held
        future.add_done_callback(lambda done: self._held.pop(done, None))
        return future

    def doing(self, future: Future) -> str | None:
        judges = list(self._held.get(future, ()))  # a copy: the slot's thread clears it when done
        return judges[0].doing if judges else None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for judge in self._judges:
            judge.close()

