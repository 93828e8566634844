"""What the judge's helpers need of a session: the members of `session.Session` that measure.py and
drive.py use (`TimedSession`), those checking.py uses (`CheckingSession`), and nothing else, with
`Look`, what the judge read of one timed call's output, which both hand around.

The session calls `measure.time_shape(self, ...)`, which drives the calls (`drive.run_calls`), which
talk to the worker through the session again; it calls `checking.check(self, ...)`, which does the
same. Naming those interfaces here, below all three, keeps the loops Session -> measure -> drive ->
Session and Session -> checking -> Session out of the import graph, and tests/test_session_interface.py
holds each interface to what its modules use and to what `Session` provides.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from typing import Protocol

import torch

from kscience.device import Device
from kscience.evaluate.judge.input_sets import InputSets
from kscience.evaluate.sandbox.workers import Worker
from kscience.problems import Problem


@dataclasses.dataclass
class Look:
    """What the judge read of one timed call's output, right after the call returned."""
    seed: int  # the inputs the call had
    raw: torch.Tensor  # its bytes at `ranges`
    ranges: list
    shape: list = dataclasses.field(default_factory=list)  # what the worker said the output was
    dtype: str = ""


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


class CheckingSession(Protocol):
    problem: Problem
    worker: Worker  # killed where a reply breaks the protocol
    used_seeds: set[int]  # every seed sent to the worker
    output_bytes: int  # set here: the size of the checked output, which the timed calls' outputs must have
    ranges: list[list[list[int]]]  # byte ranges of the last `sample`
    sets: InputSets  # input sets built ahead (input_sets.py)
    check_call_s: float  # set here: the judge's clock around the last correctness call

    def ask(self, cmd: dict, phase: str, shape: dict | None = None, limit_s: float | None = None) -> None: ...

    def reply(self, phase: str, shape: dict | None = None, expect: str = "ok") -> dict: ...

    def tensor(self, phase: str, shape: dict, max_bytes: int) -> torch.Tensor: ...

    def sample(self, phase: str, shape: dict, like: list[torch.Tensor], whole: bool = False,
               blocks: int | None = None, edges: bool = False) -> list[torch.Tensor | None]: ...

    def phase(self, name: str) -> AbstractContextManager[None]: ...

    def inputs(self, seed: int, shape: dict) -> list: ...

    def expected(self, data: list) -> torch.Tensor: ...

    def give_back_memory(self) -> None: ...
