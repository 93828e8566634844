"""Evaluations on a Ray cluster: each runs in a judge actor holding one GPU (or one CPU without GPUs).

Only data crosses the cluster: the request goes out as a plain dict, the judge runs inside
the Ray worker, and the result comes back as `EvalResult.to_dict()`; the run database stays
with the driver. Each slot is a long-lived actor, not a task per evaluation: a GPU task got
a fresh Ray worker every time (Ray's max_calls=1 for GPU tasks), which imported torch and
the judge again and could keep no spare worker, about 3.5 s of the 8.2 s an evaluation took
through Ray against 4.7 s locally. An actor imports once and keeps its slot's spare worker
ready, exactly like a local slot.

A candidate's faults never reach Ray (the judge turns them into statuses from its own child
process), so Ray's retries cover only the infrastructure: an actor whose process or node
dies mid-evaluation is restarted (elsewhere, if its node is gone) and the evaluation run
again, up to `max_retries` times. When every attempt is lost the future holds a "crashed"
result, never an exception, and the slot gets a fresh actor.
Built-in problems travel with the package; a KernelBench file or GPU MODE folder travels with each
request (carried.py), so a node needs no copy of it at the driver's path.

Ray is optional (`pip install kscience[ray]`) and imported only when this executor is built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from kscience.device import DEVICE_VAR, cpu_forced
from kscience.evaluate.executors.base import Executor, check_positive
from kscience.evaluate.executors.carried import judged_here
from kscience.evaluate.result import CRASHED, EvalRequest, EvalResult

# Settings that change how an evaluation runs; they follow the driver to every Ray worker.
# Paths (such as KSCIENCE_CACHE) stay per machine.
FORWARDED_ENV = ("TRITON_INTERPRET", DEVICE_VAR, "KSCIENCE_SANDBOX_NAMESPACES", "KSCIENCE_WORKER_RSS_BYTES")


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError("the Ray executor needs Ray: pip install kscience[ray]") from None
    return ray


class JudgeActor:
    """One slot on the cluster. Ray pins the actor's GPU with the visibility variable, so the
    judge addresses it as device 0; the actor evaluates one request at a time."""

    def __init__(self, on_gpu: bool):
        from kscience.evaluate.judge import evaluation  # torch and the judge, imported once per slot

        evaluation.judging_process()
        self._evaluate, self._gpu = evaluation.evaluate, 0 if on_gpu else None

    def evaluate(self, request: dict) -> dict:
        # The next evaluation's worker starts now, as in a local slot.
        return self._evaluate(judged_here(EvalRequest(**request)), gpu=self._gpu, keep_spare=True).to_dict()

    def close(self) -> None:
        from kscience.evaluate.sandbox.spares import close_spares

        close_spares()


class RayExecutor(Executor):
    """Evaluations as Ray tasks: at most one per GPU of the cluster (capped by `gpus`), or one
    per CPU on a cluster without GPUs (capped by `cpu_workers`).

    `address`: None joins the cluster RAY_ADDRESS names, or one started on this machine with
    `ray start`, and otherwise starts a private one; "auto" insists on joining; "ray://HOST:PORT"
    reaches a remote cluster through Ray Client. A Ray session already open in this process is
    reused as it is, and left open.
    """

    judges_elsewhere = True  # the cluster's nodes decide what can be profiled there

    def __init__(self, address: str | None = None, gpus: int | None = None,
                 cpu_workers: int | None = None, max_retries: int = 3):
        check_positive("gpus", gpus)
        check_positive("cpu_workers", cpu_workers)
        ray = _import_ray()
        self._ray = ray
        env = {"env_vars": {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}}
        self._owns_session = not ray.is_initialized()
        if self._owns_session:
            job_env = dict(env)
            if address is not None:
                # Nodes of an existing cluster may hold another kscience, or none: ship the driver's
                # (Ray uploads a local package only when the job starts).
                job_env["py_modules"] = [str(Path(__file__).resolve().parents[2])]
            # No dashboard for a cluster that may be started here: it only costs start-up time.
            ray.init(address=address, runtime_env=job_env, **({} if address else {"include_dashboard": False}))
        resources = ray.cluster_resources()
        cluster_gpus = int(resources.get("GPU", 0))
        self.on_gpu = cluster_gpus > 0 and not cpu_forced()
        available, cap = (cluster_gpus, gpus) if self.on_gpu else (int(resources.get("CPU", 1)), cpu_workers)
        self._capacity = max(1, min(available, cap) if cap else available)

        # An actor keeps the GPU Ray gave it for life, so the judge's CUDA context and its spare
        # worker always belong to that GPU. Actors start on their slot's first evaluation.
        self._actor_class = ray.remote(num_gpus=1 if self.on_gpu else 0, num_cpus=1, max_restarts=max_retries,
                                       max_task_retries=max_retries, runtime_env=env)(JudgeActor)
        self._actors: "queue.Queue[list]" = queue.Queue()  # one box per slot: [actor or None]
        for _ in range(self._capacity):
            self._actors.put([None])
        # One driver thread per slot waits on its actor, so `capacity` is a hard cap like the
        # local executor's, and requests beyond it queue here, cancellable, not in the cluster.
        self._pool = ThreadPoolExecutor(max_workers=self._capacity, thread_name_prefix="kscience-ray")

    @property
    def capacity(self) -> int:
        return self._capacity

    def _run(self, request: EvalRequest) -> EvalResult:
        started = time.monotonic()
        box = self._actors.get()
        try:
            if box[0] is None:
                box[0] = self._actor_class.remote(self.on_gpu)
            ref = box[0].evaluate.remote(dataclasses.asdict(request))
            return EvalResult.from_dict(self._ray.get(ref))
        except self._ray.exceptions.RayTaskError:
            raise  # the judge itself raised (a broken problem file): the same error as run locally
        except self._ray.exceptions.RayError as exc:
            box[0] = None  # restarts used up: the slot's next evaluation gets a new actor
            first_line = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            return EvalResult(status=CRASHED, message=f"evaluation lost: {first_line}"[:400],
                              wall_s=time.monotonic() - started)
        finally:
            self._actors.put(box)

    def submit(self, request: EvalRequest) -> "Future[EvalResult]":
        return self._pool.submit(self._run, request)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        actors = [box[0] for box in list(self._actors.queue) if box[0] is not None]
        with contextlib.suppress(self._ray.exceptions.RayError):  # an actor already gone has no spare
            self._ray.get([a.close.remote() for a in actors], timeout=30)
        for actor in actors:
            self._ray.kill(actor)
        if self._owns_session:
            self._ray.shutdown()
