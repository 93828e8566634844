"""What every part of a run's loop shares: where the run is recorded and announced (`Journal`), and
whether it should stop (`Stopping`). The controller makes one of each and hands them to its lines and
to `Judging`, so each part is given what it uses rather than the controller itself."""

from __future__ import annotations

import threading

from kscience.run.events import Event, EventBus, StageChanged
from kscience.record.store import Store
from kscience.record.candidate import Candidate


class Stopped(Exception):
    """A stop was requested (or another experiment failed); the run resumes later from the store."""


class Journal:
    """One run's rows in the store and its event bus: every step commits to the store, then announces."""

    def __init__(self, store: Store, run_id: str, bus: EventBus):
        self.store, self.run_id, self.bus = store, run_id, bus

    def candidates(self) -> list[Candidate]:
        return self.store.candidates(self.run_id)

    def emit(self, event: Event) -> None:
        self.bus.publish(event)

    def stage(self, stage: str, iteration: int, detail: str = "", line: int = 0) -> None:
        self.emit(StageChanged(stage=stage, iteration=iteration, detail=detail, line=line))


class Stopping:
    """A user's stop (`Run.stop` sets the event), and a halt once one experiment failed: every line and
    evaluation stops at its next step."""

    def __init__(self, stop: threading.Event):
        self._stop = stop
        self._halted = False

    def requested(self) -> bool:
        return self._stop.is_set()

    def halt(self) -> None:
        self._halted = True

    def check(self) -> None:
        if self._stop.is_set() or self._halted:
            raise Stopped("stopped on request")
