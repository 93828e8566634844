"""The run as plain text, for places where widget views never render (papermill, nbconvert, a
terminal IPython): one display whose text is replaced in place through its display handle.

Replacing a display only reaches a batch executor while the cell that made it is executing:
nbclient drops messages addressed to a finished cell. So the text view waits in that cell until
the run ends, updating from the kernel's main thread. Nothing could press a Stop button there
anyway; an interrupt stops the run cleanly instead.
"""

from __future__ import annotations

import threading

from kscience.record.summary import budget_parts
from kscience.run.events import EvaluationWaiting, StageChanged
from kscience.run.log import LogTail
from kscience.jupyter import panels
from kscience.record.liveness import display_status
from kscience.record.snapshot import Snapshot
from kscience.record.summary import summary_lines

LATEST_SHOWN = 8  # newest lines of the run's log shown under the summary
IDLE_REFRESH_S = 5.0  # redraw this often without events, so the clock moves


def summary_text(snap: Snapshot, stages: dict[int, panels.Stage] | None = None,
                 session_s: float | None = None, stopping: bool = False, log: list[str] | None = None) -> str:
    """A few lines: what runs where, what it is doing, the best so far and the newest lines of its log (the
    lines `kscience run` prints: verdicts, writes that produced no kernel, repairs, notices)."""
    facts = dict(panels.header_facts(snap))
    lines = [f"kscience run {snap.run.id} ({facts['problem']}) on {facts['device']} with {facts['LLM']}"
             + (f", evaluator busy {facts['evaluator busy']}" if "evaluator busy" in facts else ""),
             f"  now:    {panels.stage_text(snap, stages, stopping)}",
             f"  tried:  {len(snap.settled)} candidate(s), {len(snap.correct)} correct",
             f"  best:   {facts['best']}",
             f"  budget: {', '.join(budget_parts(snap.run.config, snap.usage, snap.elapsed_s(), session_s))}"]
    if log:
        lines += ["  log:", *(f"  {line}" for line in log[-LATEST_SHOWN:])]
    return "\n".join(lines)


def final_text(result) -> str:
    """The end-of-run table the CLI prints, so a notebook and a terminal report the same numbers."""
    snap = result.snapshot()
    row = snap.run
    lines = summary_lines(row, snap.metrics())
    if row.error:
        lines.append(f"error: {row.error}")
    return "\n".join(lines)


class TextSummary:
    """A text display of a run that follows it; `block()` keeps it current until the run ends."""

    def __init__(self, result, refresh_s: float = 1.0):
        self.result, self.refresh_s = result, refresh_s
        self.display_id = f"kscience-text-{result.id}"
        self._stages: dict[int, panels.Stage] = {}  # line of work -> its latest stage
        self._stages_lock = threading.Lock()
        self._stopping = False
        self._changed, self._ended = threading.Event(), threading.Event()
        self._log = LogTail(result.store, result.id, LATEST_SHOWN)
        self._unfollow = result.follow(self._on_change)

    def _on_change(self, event) -> None:
        if event is None:
            self._ended.set()
        elif isinstance(event, (StageChanged, EvaluationWaiting)):
            with self._stages_lock:
                panels.note_stage(self._stages, event)
        self._changed.set()

    def text(self) -> str:
        snap = self.result.snapshot()
        if display_status(snap.run) != "running" and self._ended.is_set():
            return final_text(self.result)
        started = self.result.started_at
        with self._stages_lock:
            stages = dict(self._stages)
        return summary_text(snap, stages, None if started is None else snap.taken_at - started,
                            self._stopping, self._log.lines())

    def _publish(self, update: bool) -> None:
        from IPython import get_ipython
        from IPython.display import display

        text = self.text()
        if get_ipython() is None:  # plain Python: no display machinery, just print
            print(text, flush=True)
            return
        display({"text/plain": text}, raw=True, display_id=self.display_id, update=update)

    def show(self) -> None:
        self._publish(update=False)

    def block(self) -> None:
        """Refresh at most every `refresh_s` until the run ends. The first interrupt stops the run
        after its current evaluation; a second one stops waiting and leaves the run going."""
        from IPython import get_ipython

        try:
            while not self._ended.is_set():
                try:
                    changed = self._changed.wait(IDLE_REFRESH_S)
                    self._changed.clear()
                    if changed or get_ipython() is not None:  # a display also refreshes the clock
                        self._publish(update=True)
                    self._ended.wait(self.refresh_s)
                except KeyboardInterrupt:
                    if self._stopping or not self.result.driven_here:
                        raise
                    self._stopping = True
                    self.result.stop()
        finally:
            self._unfollow()
        self._publish(update=True)
