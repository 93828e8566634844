"""The spare workers of each evaluation slot: started ahead so that their imports overlap the
evaluations before them, stopped while their slot times a shape, and killed with their process."""

from __future__ import annotations

import atexit
import contextlib
import threading
from pathlib import Path

from kscience.evaluate.sandbox import compile_cache
from kscience.evaluate.sandbox.workers import Worker, close_every_worker, worker_env


def _env_fingerprint(gpu: int | None, interpreted: bool) -> str:
    """What a worker started now would inherit, less the parts unique to each worker."""
    env = worker_env(Path("/"), gpu, interpreted, "")
    return repr(sorted((k, v) for k, v in env.items() if k not in compile_cache.private_dirs(Path("/"))))


# Workers started in advance for each evaluation slot: their Python and torch imports, 4-5 s on an
# H100 host, then overlap the evaluations before them. They touch no GPU until their job arrives.
# One spare is not enough after a short evaluation (3.3 s of fp8_blockscale_gemm left the next one
# waiting 2 s for its spare's imports); two, each started two evaluations ahead, have twice as long.
SPARES_PER_SLOT = 2
_spares: dict[tuple, list[tuple[str, Worker]]] = {}  # slot -> [(environment fingerprint, worker)], oldest first
_spares_lock = threading.Lock()


def start_worker(gpu: int | None, interpreted: bool, rss_limit_bytes: int, keep_spare: bool = False) -> Worker:
    """A fresh worker for one evaluation: the oldest spare started for this slot if it is still
    alive and was started with the environment a new worker would get now, else a new one. With
    `keep_spare`, the slot's spares are topped up now for the evaluations to come."""
    slot, fingerprint = (gpu, interpreted, rss_limit_bytes), _env_fingerprint(gpu, interpreted)
    with _spares_lock:
        queue = _spares.setdefault(slot, [])
        stale = [w for f, w in queue if f != fingerprint or not w.alive()]
        queue[:] = [(f, w) for f, w in queue if f == fingerprint and w.alive()]
        worker = queue.pop(0)[1] if queue else None
    for old in stale:
        old.close()
    if worker is None:
        worker = Worker(gpu, interpreted, rss_limit_bytes)
    worker.watch()
    if keep_spare:  # one thread per slot calls this, so nobody else tops this slot up meanwhile
        with _spares_lock:
            missing = SPARES_PER_SLOT - len(_spares[slot])
        started = [Worker(gpu, interpreted, rss_limit_bytes) for _ in range(missing)]
        with _spares_lock:
            _spares[slot].extend((fingerprint, spare) for spare in started)
    return worker


@contextlib.contextmanager
def spares_held(worker: Worker):
    """The spares of `worker`'s slot stopped for the duration. A spare still importing (seconds of
    CPU) beside a timed call disturbs both clocks: it can push an honest call's time outside its
    events past the side-work allowance, and it moves the judge's brackets by milliseconds. So a
    slot's spares import while its evaluation checks outputs and between evaluations, never while it
    times a shape."""
    with _spares_lock:
        held = [spare for _, spare in _spares.get(worker.slot, [])]
    for spare in held:
        spare.freeze()
    try:
        yield
    finally:
        for spare in held:
            spare.thaw()


@atexit.register
def close_spares() -> None:
    with _spares_lock:
        spares = [worker for queue in _spares.values() for _, worker in queue]
        _spares.clear()
    for worker in spares:
        worker.close()


def close_all() -> None:
    """Kill every worker of this process, spares and the ones evaluating, thawing what is frozen:
    what a judge does when it is told to stop (a signal) or its own parent has died."""
    close_spares()
    close_every_worker()
