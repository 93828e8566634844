"""What timing a shape needs of a session: the members of `session.Session` that measure.py and
drive.py use, and nothing else.

The session calls `measure.time_shape(self, ...)`, which drives the calls (`drive.run_calls`), which
talk to the worker through the session again. Naming that interface here makes the loop
Session -> measure -> drive -> Session visible in the types, and tests/test_session_interface.py
holds it to what the two modules use and to what `Session` provides.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kscience.device import Device
    from kscience.evaluate.judge.drive import Look
    from kscience.evaluate.sandbox.workers import Worker
    from kscience.problems import Problem


class TimedSession(Protocol):
    problem: Problem
    device: Device
    worker: Worker  # its descriptor socket takes the judge's buffers (buffers.py)
    used_seeds: set[int]  # every seed sent to the worker
    output_bytes: int  # the size of the checked output, which a timed call's output must have

    def ask(self, cmd: dict, phase: str, shape: dict | None = None, limit_s: float | None = None) -> None: ...

    def reply(self, phase: str, shape: dict | None = None, expect: str = "ok") -> dict: ...

    def phase(self, name: str) -> AbstractContextManager[None]: ...

    def inputs(self, seed: int, shape: dict) -> list: ...

    def recheck(self, look: Look, shape: dict) -> None: ...

    def hold_for_recheck(self, shape: dict, seed: int, data: list) -> None: ...

    def others_on_gpu(self) -> int | None: ...
