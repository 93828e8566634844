"""Which executor a run's `--executor` spec names. Kept apart from base.py, whose `Executor`
every kind of executor subclasses, so that naming them here makes no import cycle."""

from __future__ import annotations

from kscience.evaluate.executors.base import Executor, LocalExecutor
from kscience.evaluate.executors.queue_dir import QueueExecutor, queue_directory
from kscience.evaluate.executors.ray_cluster import RayExecutor

EXECUTORS = "local, ray, ray://HOST:PORT or queue:DIR (for `kscience worker DIR`)"  # the specs make_executor takes


def valid_executor(spec: str) -> bool:
    """Whether `make_executor` understands `spec`, without making anything."""
    return spec in ("local", "ray") or spec.startswith(("ray://", "queue:"))


def make_executor(spec: str | None = None, gpus: int | None = None,
                  cpu_workers: int | None = None) -> Executor:
    """`local` (default), `ray` (the cluster RAY_ADDRESS names or `ray start` began on this machine,
    else a new one here), `ray://HOST:PORT` (a remote cluster, through Ray Client) or `queue:DIR`
    (requests as files in DIR for `kscience worker DIR`; `gpus` requests in flight, default 1)."""
    spec = spec or "local"
    if spec == "local":
        return LocalExecutor(gpus=gpus, cpu_workers=cpu_workers)
    if spec == "ray" or spec.startswith("ray://"):
        return RayExecutor(address=None if spec == "ray" else spec, gpus=gpus, cpu_workers=cpu_workers)
    if spec.startswith("queue:"):
        return QueueExecutor(queue_directory(spec), capacity=gpus or cpu_workers or 1)
    raise ValueError(f"unknown executor {spec!r}: use {EXECUTORS}")
