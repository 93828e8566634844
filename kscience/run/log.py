"""What a run's events say in a live log, line by line: the one wording `kscience run` prints on stderr
and a notebook's live views show, so a terminal and a notebook tell the same story (verdicts, writes that
produced no kernel, repairs, long evaluations, notices).

A failure's message is given whole, wrapped under its line, never cut mid-sentence.
"""

from __future__ import annotations

import textwrap
import threading
from collections import deque

from kscience.record.store import WRITE_FAILED
from kscience.record.text import fmt_us, fmt_x, kind_text
from kscience.run.events import (CandidateEvaluated, CandidateProfiled, CandidateWritten, EvaluationWaiting,
                                 HypothesesProposed, Notice, StageChanged, event_from_dict)
from kscience.record.candidate import speedup

WIDTH = 110  # a failure's message wraps at this many columns
MESSAGE_INDENT = " " * 8
EARLIER_SEED_MARK = "*"  # beside "vs seed" where the seed was timed by an earlier session (see Notice)
LOGGED_STAGES = ("done", "compose")  # stages whose detail is itself a line of the log


def _tag(iteration: int) -> str:
    """A verdict's iteration: with several lines at once, verdicts of different iterations interleave."""
    return f"it {iteration}" if iteration else ""


def wrapped(message: str, indent: str = MESSAGE_INDENT) -> list[str]:
    """A message whole, on as many indented lines of at most WIDTH columns as it needs."""
    text = " ".join((message or "").split())
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent) if text else []


def _verdict(iteration: int, cand_id: str, kind: str, status: str, timing: str, what: str) -> str:
    return f"  {_tag(iteration):<5} {cand_id} {kind_text(kind):<14} {status:<13} {timing:<36}  {what}".rstrip()


def vs_seed_text(geomean_us: float | None, seed_us: float | None, seed_earlier: bool = False) -> str:
    """"1,144.6 us    2.91x vs seed", marked where the seed was timed by an earlier session."""
    ratio = fmt_x(speedup(seed_us, geomean_us))
    return f"{fmt_us(geomean_us, ' us'):>16} {ratio:>9} vs seed{EARLIER_SEED_MARK if seed_earlier else ''}"


def event_lines(event) -> list[str]:
    """The lines an event adds to the log (none for most stage changes, which are the run's status line)."""
    if isinstance(event, StageChanged):
        if event.stage in LOGGED_STAGES:
            return [event.detail]
        if event.stage == "repair":
            return [f"  {_tag(event.iteration):<5} repairing {event.detail}"]
        return []
    if isinstance(event, Notice):
        return [event.text]
    if isinstance(event, HypothesesProposed):
        chosen = [p["title"] for p in event.plans if p.get("chosen")]
        return [f"iteration {event.iteration}: from {event.base_id}, trying: {'; '.join(chosen)}"]
    if isinstance(event, CandidateWritten):
        if event.status != WRITE_FAILED:
            return []
        return [_verdict(event.iteration, event.candidate_id, event.kind, "write_failed", "", event.plan_title),
                *wrapped(event.message or "the writer produced no source")]
    if isinstance(event, CandidateEvaluated):
        if event.status == "ok":
            timing = vs_seed_text(event.geomean_us, event.seed_us, event.seed_earlier)
            return [_verdict(event.iteration, event.candidate_id, event.kind, event.status, timing, event.hypothesis)]
        return [_verdict(event.iteration, event.candidate_id, event.kind, event.status, "", event.hypothesis),
                *wrapped(event.message)]
    if isinstance(event, CandidateProfiled):  # what the profile cost, or why there is none (said once)
        return [f"  {event.message}"]
    if isinstance(event, EvaluationWaiting):
        return [f"  {event.candidate_id} waiting {event.waited_s:.0f} s: {event.state}"]
    return []


def stored_log(events: list[dict], last: int | None = None) -> list[str]:
    """The log of a run as its stored events (Store.events rows) tell it; the `last` lines only, if given."""
    from_store = [line for row in events for line in event_lines(_event(row))]
    return from_store[-last:] if last else from_store


class LogTail:
    """The newest `keep` lines of a run's log, read from its stored events as they are committed (so a view
    of a run that another process drives shows the lines its terminal shows); `lines()` reads only what is new."""

    def __init__(self, store, run_id: str, keep: int):
        self.store, self.run_id = store, run_id
        self._lines: deque[str] = deque(maxlen=keep)
        self._after = 0
        self._lock = threading.Lock()

    def lines(self) -> list[str]:
        with self._lock:
            rows = self.store.events(self.run_id, self._after)
            if rows:
                self._after = rows[-1]["seq"]
                self._lines.extend(stored_log(rows))
            return list(self._lines)


def _event(row: dict):
    try:
        return event_from_dict(row["payload"])
    except (KeyError, TypeError):  # an event type or field this version does not know
        return None
