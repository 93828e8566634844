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
    import torch

    from kscience.device import Device
    from kscience.evaluate import output_buffer
    from kscience.evaluate.judge.drive import Look
    from kscience.evaluate.sandbox.workers import Worker
    from kscience.problems import Problem


class TimedSession(Protocol):
    problem: Problem
    device: Device
    worker: Worker  # frozen while the judge reads a timed call's output itself
    peek_pid: int | None  # the worker process whose memory the judge reads
    used_seeds: set[int]  # every seed sent to the worker
    ranges: list[list[list[int]]]  # byte ranges of the last `sample`
    worker_info: dict  # the worker's ready reply (its idle gap)
    echo_us: float  # a message's round trip before any candidate code existed
    reference_outside: dict[str, float]  # by shape label, where a side-work doubt asked
    keep: output_buffer.Mapping | None  # the judge's own buffer the timed outputs are copied into (GPU)
    fill_word: int  # what the worker fills it with before each call

    def ask(self, cmd: dict, phase: str, shape: dict | None = None, limit_s: float | None = None) -> None: ...

    def reply(self, phase: str, shape: dict | None = None, expect: str = "ok") -> dict: ...

    def sample(self, phase: str, shape: dict, like: list[torch.Tensor], whole: bool = False,
               blocks: int | None = None, edges: bool = False) -> list[torch.Tensor | None]: ...

    def phase(self, name: str) -> AbstractContextManager[None]: ...

    def hand_over_output_buffer(self, shape: dict) -> int: ...

    def recheck(self, look: Look, shape: dict) -> None: ...

    def build_us(self, shape: dict) -> float: ...

    def build_ahead(self, shape: dict, ready: list[int]) -> None: ...

    def reference_outside_us(self, shape: dict) -> float: ...

    def least_call_us(self) -> float: ...

    def others_on_gpu(self) -> int | None: ...
