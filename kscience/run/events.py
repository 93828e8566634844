"""What a run tells its watchers: typed events and the bus that delivers them.

The controller publishes each event through `EventBus.publish`, which first hands it to the
`record` callback (the store commits it) and only then to subscribers, so nothing a progress
bar or notebook has shown can be missing from the database. Subscribers are plain callables,
called on the controller's thread; one that raises is logged and skipped, never fatal.
"""

from __future__ import annotations

import difflib
import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import Callable, ClassVar

log = logging.getLogger(__name__)

DIFF_LIMIT_CHARS = 20000  # a written candidate's diff against its parent, as announced


@dataclass
class Event:
    type: ClassVar[str] = "event"

    def to_dict(self) -> dict:
        return {"type": self.type, **asdict(self)}


@dataclass
class StageChanged(Event):
    """The controller moved on: seed, reference, vendor, compiled, select, design, write, queued (waiting for a
    free evaluation slot), evaluate, repair, finding, profile, compose (a per-shape composite, `detail` says
    what it is made of), done; "line ended" when one of several lines ends."""

    type: ClassVar[str] = "stage_changed"
    stage: str
    iteration: int
    detail: str = ""
    line: int = 0  # the line of work (1..K) that moved on; 0 for the run's own steps (seed, baselines, done)


@dataclass
class HypothesesProposed(Event):
    """One design round: the selector's choice and the designer's plans (`chosen` marks those run)."""

    type: ClassVar[str] = "hypotheses_proposed"
    iteration: int
    base_id: str
    reference_id: str | None
    justification: str
    plans: list[dict] = field(default_factory=list)


def source_diff(before: str, after: str) -> str:
    """The unified diff a written candidate is announced with (CandidateWritten.diff), cut at DIFF_LIMIT_CHARS."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 "parent.py", "candidate.py")
    return "".join(lines)[:DIFF_LIMIT_CHARS]


@dataclass
class CandidateWritten(Event):
    type: ClassVar[str] = "candidate_written"
    candidate_id: str
    parent_id: str | None
    kind: str  # seed, reference, compiled (torch.compile of the reference), child or repair
    iteration: int
    plan_title: str
    status: str  # "pending", or "write_failed" when the writer produced no source
    diff: str = ""  # unified diff against the parent's source
    message: str = ""  # why the writer produced no source (write_failed), whole


@dataclass
class CandidateEvaluated(Event):
    type: ClassVar[str] = "candidate_evaluated"
    candidate_id: str
    parent_id: str | None
    kind: str
    iteration: int
    hypothesis: str
    status: str
    geomean_us: float | None
    message: str
    best_us: float | None  # the run's best after this evaluation
    seed_us: float | None
    # The seed was timed by an earlier session of the run (before a resume), so `seed_us` is a time taken under
    # another moment's machine load: a ratio against it says less than one taken in the same session.
    seed_earlier: bool = False


@dataclass
class EvaluationWaiting(Event):
    """An evaluation waits on something outside this process, e.g. a worker reading a queue
    directory: what it waits for, and for how long so far. Published when the state changes,
    and again every few minutes while it does not."""

    type: ClassVar[str] = "evaluation_waiting"
    candidate_id: str
    iteration: int
    state: str
    waited_s: float
    line: int = 0


@dataclass
class CandidateProfiled(Event):
    """A profiler looked at a candidate outside its timed evaluation (--profile), or could not:
    `profile_s` is what it cost (None when it did not run) and `message` one line of what it saw or why not."""

    type: ClassVar[str] = "candidate_profiled"
    candidate_id: str | None  # None: a notice about the profiler itself (e.g. ncu is not installed)
    iteration: int
    profiler: str
    profile_s: float | None
    message: str


@dataclass
class Notice(Event):
    """Something a watcher is told once rather than per evaluation: baselines skipped because their libraries
    are not installed, how a resumed session's ratios against the seed should be read."""

    type: ClassVar[str] = "notice"
    text: str
    iteration: int = 0
    missing: list[str] = field(default_factory=list)  # the packages not installed here, for a skipped baseline


@dataclass
class FindingRecorded(Event):
    type: ClassVar[str] = "finding_recorded"
    plan_id: str
    candidate_id: str | None
    iteration: int
    text: str
    predicted_min_pct: float | None
    predicted_max_pct: float | None
    measured_pct: float | None


@dataclass
class RunFinished(Event):
    """The run ended on its own terms: all iterations done ("finished") or a stop ("stopped")."""

    type: ClassVar[str] = "run_finished"
    status: str
    summary: dict


@dataclass
class RunFailed(Event):
    """The run ended early and can be resumed. `status` is "failed", or "stopped" for a spent budget."""

    type: ClassVar[str] = "run_failed"
    status: str
    error: str
    detail: str = ""  # a traceback for unexpected errors, kept in the store and never printed


EVENT_TYPES = {cls.type: cls for cls in (StageChanged, HypothesesProposed, CandidateWritten,
                                         CandidateEvaluated, EvaluationWaiting, CandidateProfiled, Notice,
                                         FindingRecorded, RunFinished, RunFailed)}


def event_from_dict(d: dict) -> Event:
    """Rebuild an event from `to_dict()` output or a stored payload."""
    d = dict(d)
    cls = EVENT_TYPES[d.pop("type")]
    return cls(**d)


class EventBus:
    """Record first, then fan out. Thread-safe: subscribe from any thread while a run publishes."""

    def __init__(self, record: Callable[[Event], None] | None = None):
        self._record = record
        self._subscribers: list[Callable[[Event], None]] = []
        self._complained: set[int] = set()  # subscribers already reported: one warning each, not one per event
        self._lock = threading.Lock()

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call `callback(event)` for every later event; returns a function that unsubscribes."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def publish(self, event: Event) -> None:
        if self._record is not None:
            self._record(event)  # a store failure propagates: an unrecorded event is never shown
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(event)
            except Exception as exc:  # a broken watcher must not end the run
                if id(callback) not in self._complained:
                    self._complained.add(id(callback))
                    log.warning("event subscriber %r failed on %s (further failures not reported): %s: %s",
                                callback, event.type, type(exc).__name__, exc)
