"""Where one evaluation's seconds go, and what its judge is doing now (the trusted side).

Every step of a `Session` runs inside a named phase ("inputs", "check", "time" ...). The phases add up to
no more than the evaluation's wall time: a phase inside another counts for itself alone (the judge's
reference inside a check). Each time a phase starts or resumes, `on_phase` is told what the judge is doing
in words ("checking correctness"), which a slot passes up to the progress line of a long evaluation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

_DOING = {"start": "starting its worker", "inputs": "building inputs", "builds": "timing its own input builds",
          "import": "importing the candidate", "reference": "running the reference", "check": "checking correctness",
          "reads": "reading timed outputs", "time": "timing", "recheck": "rechecking timed outputs",
          "kernels": "timing each launched kernel", "finish": "finishing", "close": "closing", "closing": "closing",
          "pristine": "timing empty calls before the import"}


def doing(phase: str) -> str:
    """A phase (of `Phases` or a command's limit) as what the judge is doing: "checking correctness"."""
    return _DOING.get(phase, phase)


class Phases:
    def __init__(self, on_phase: Callable[[str], None] | None = None):
        self.on_phase = on_phase  # told what the judge is doing each time a phase starts or resumes
        self.seconds: dict[str, float] = {}  # by phase: EvalResult.phases_s
        self._open: list[str] = []  # the phases under way, innermost last
        self._inner_s: list[float] = []  # seconds of phases nested in each open phase

    @contextlib.contextmanager
    def timed(self, name: str):
        """Adds the wall time of the block to `seconds[name]`, less the phases nested in it."""
        t0 = time.monotonic()
        self._inner_s.append(0.0)
        self._open.append(name)
        self._announce()
        try:
            yield
        finally:
            spent = time.monotonic() - t0
            self.seconds[name] = self.seconds.get(name, 0.0) + spent - self._inner_s.pop()
            if self._inner_s:
                self._inner_s[-1] += spent
            self._open.pop()
            if self._open:
                self._announce()

    def current(self) -> str | None:
        """The innermost phase under way, or None between phases."""
        return self._open[-1] if self._open else None

    def _announce(self) -> None:
        if self.on_phase is not None:
            self.on_phase(doing(self._open[-1]))
