"""The live dashboard (ipywidgets 8): header, timing plot, hypotheses, diffs, leaderboard, the run's log, Stop.

Events arrive on the run's thread. The handler only notes the stage and pokes a throttle; the
throttle redraws from a fresh store snapshot at most a few times a second, on a timer thread, so
neither the run nor the kernel waits for matplotlib. Widget updates leave the kernel at any time,
from any thread; a click comes back as a message the kernel handles only when no cell is running.
The cell that started the run has returned by then, so Stop reaches `Run.stop` at once.
When the run ends, its output is replaced by the static view of kscience.jupyter.static, which a
saved notebook shows without a kernel (a widget would show "model not found" there).
"""

from __future__ import annotations

import threading
import uuid

import ipywidgets as W
from IPython.display import update_display

from kscience.run.events import EvaluationWaiting, StageChanged
from kscience.run.log import LogTail
from kscience.jupyter import panels
from kscience.jupyter.live import Throttle
from kscience.jupyter.plots import png_bytes, timeline_figure
from kscience.jupyter.static import run_html
from kscience.record.liveness import display_status
from kscience.record.store import BASELINE_KINDS

BAR_STYLES = {"finished": "success", "stopped": "warning", "failed": "danger", "interrupted": "danger"}
LOG_SHOWN = 40  # newest lines of the run's log in its panel


def _panel(title: str, *children, width: str = "50%") -> W.VBox:
    heading = W.HTML(f'<div style="font-weight: 600; font-size: 13px; margin: 4px 0;">{title}</div>')
    # min_width 0: a flex item may shrink below its content's width, so wide content scrolls
    # inside its own box instead of pushing the panel past its share of the row.
    panel = W.VBox([heading, *children], layout=W.Layout(width=width, min_width="0", padding="0 8px 0 0",
                                                         overflow="hidden"))
    panel.add_class("kscience-panel")
    return panel


class Dashboard:
    """A live view of one run; `widget` is what to display. Works for any run: one this kernel
    drives (Stop enabled), one another process drives (followed through the store), or an ended
    one (a static but browsable view)."""

    def __init__(self, result, refresh_s: float = 0.4):
        self.result = result
        self._stages: dict[int, panels.Stage] = {}  # line of work -> its latest stage (line 0: the run's own steps)
        self._stopping = False
        self._follow_latest = True  # the diff viewer shows the newest candidate until one is picked
        self._picking = False  # set while the code (not the user) changes the candidate picker
        self._render_lock = threading.Lock()
        self._stage_lock = threading.Lock()  # the stage line is written from three threads

        self.header = W.HTML()
        self.stage = W.HTML()
        self.progress = W.IntProgress(min=0, max=1, value=0, bar_style="info",
                                      layout=W.Layout(width="260px", margin="0 10px"))
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="warning",
                                    tooltip="End the run after the current evaluation; it can be resumed later")
        self.stop_button.on_click(self._stop_clicked)
        if not result.driven_here:
            self.stop_button.layout.display = "none"
        self.plot = W.Image(format="png", layout=W.Layout(width="98%"))  # 100% plus its margin would overflow
        self.plot.add_class("kscience-plot")
        self.leaderboard = W.HTML(layout=W.Layout(max_height="360px", overflow="auto"))
        self.leaderboard.add_class("kscience-leaderboard-panel")
        self.lineage = W.HTML(layout=W.Layout(overflow="auto"))
        self.hypotheses = W.HTML(layout=W.Layout(max_height="460px", overflow="auto"))
        self.hypotheses.add_class("kscience-hypotheses")
        self.picker = W.Dropdown(options=[], layout=W.Layout(width="98%"))
        self.picker.observe(self._picked, names="value")
        self.diff = W.HTML(layout=W.Layout(max_height="460px", overflow="auto"))
        self.log = W.HTML(layout=W.Layout(max_height="240px", overflow="auto"))
        self.log.add_class("kscience-log")
        self._log = LogTail(result.store, result.id, LOG_SHOWN)
        self.display_id = f"kscience-dashboard-{result.id}-{uuid.uuid4().hex[:8]}"
        self._displayed = False  # `shown` was called: the display exists and can be replaced
        self._finish_lock = threading.Lock()
        self._final_html: str | None = None  # the static view that replaces the widget once the run is over
        self.diff.add_class("kscience-diffs")

        controls = W.HBox([self.stop_button, self.progress, self.stage], layout=W.Layout(align_items="center"))
        self.widget = W.VBox([
            self.header, controls,
            W.HBox([_panel("Timing", self.plot, width="60%"),
                    _panel("Leaderboard", self.leaderboard, W.HTML("<b>Lineage</b>"), self.lineage, width="40%")]),
            W.HBox([_panel("Hypotheses", self.hypotheses),
                    _panel("Diff (parent &rarr; child)", self.picker, self.diff)]),
            _panel("Log", self.log, width="100%"),
        ], layout=W.Layout(border="1px solid #e0e0e0", padding="8px"))
        self.widget.add_class("kscience-dashboard")

        self._throttle = Throttle(self.render, refresh_s)
        self.render()
        self._follow_lock = threading.Lock()
        self._over = False  # the run has ended (possibly before `follow` even returned)
        self._unfollow = None
        unfollow = result.follow(self._on_change)
        with self._follow_lock:
            self._unfollow = unfollow
            if self._over:
                unfollow()

    # --- events ------------------------------------------------------------------------------
    def _on_change(self, event) -> None:
        if event is None:  # the run is over: stop following and draw the final state now
            with self._follow_lock:
                self._over = True
                unfollow = self._unfollow
            if unfollow is not None:
                unfollow()
            self._throttle.flush()
            self._finish()
            return
        if isinstance(event, (StageChanged, EvaluationWaiting)):
            with self._stage_lock:
                panels.note_stage(self._stages, event)
            self._show_stage()  # cheap, so it is not throttled
        self._throttle.poke()

    # --- display -----------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs) -> dict:
        """The live widget while the run goes on (with a static copy for frontends without widgets);
        once it is over, the static view alone, which a saved notebook shows without its kernel."""
        if self._final_html is not None:
            return {"text/plain": f"kscience run {self.result.id}", "text/html": self._final_html}
        return {**self.widget._repr_mimebundle_(**kwargs), "text/html": run_html(self.result.snapshot())}

    def shown(self) -> None:
        """Called once the dashboard is displayed under `display_id`; a run already over is
        replaced by its static view at once."""
        with self._follow_lock:
            self._displayed = True
            over = self._over
        if over:
            self._finish()

    def _finish(self) -> None:
        """Replace the widget by the static view of the final state (the kernel may be gone when
        the notebook is next opened)."""
        with self._finish_lock:  # `shown` and the run's end can race to it
            if not self._displayed or self._final_html is not None:
                return
            html = run_html(self.result.snapshot())
            self._final_html = (f'<div class="kscience-dashboard kscience-ended" style="border: 1px solid #e0e0e0; '
                                f'padding: 8px;">{html}</div>')
        update_display(self, display_id=self.display_id)

    def _stop_clicked(self, _button) -> None:
        self._stopping = True
        self.stop_button.disabled = True
        self.stop_button.description = "Stopping"
        self.result.stop()
        self._show_stage()

    def _picked(self, change) -> None:
        if self._picking:
            return
        options = [value for _, value in self.picker.options]
        self._follow_latest = bool(options) and change["new"] == options[0]
        self.diff.value = panels.diff_html(self.result.snapshot(), change["new"])

    # --- drawing -----------------------------------------------------------------------------
    def _show_stage(self, snap=None) -> None:
        """Compute and write the stage line in one step, so a stale line never overwrites a newer one."""
        with self._stage_lock:
            snap = snap or self.result.snapshot()
            text = panels.stage_text(snap, dict(self._stages), self._stopping)
            self.stage.value = f'<span style="{panels.BOX}">{panels.esc(text)}</span>'

    def _session_s(self, snap) -> float | None:
        started = self.result.started_at
        if started is None:
            return None
        end = snap.taken_at if display_status(snap.run) == "running" else snap.run.updated
        return max(0.0, end - started)

    def render(self) -> None:
        """Redraw every panel from one snapshot, so they never disagree with each other: every
        value is computed first (the plot takes longest) and then assigned together."""
        with self._render_lock:
            snap = self.result.snapshot()
            status = display_status(snap.run)
            plot = png_bytes(timeline_figure(snap, session_starts=self._session_starts(snap)))
            header = panels.header_html(snap, self._session_s(snap))
            board, lineage = panels.leaderboard_html(snap), panels.lineage_html(snap)
            hypotheses, log = panels.hypotheses_html(snap), panels.log_html(self._log.lines())
            self.header.value, self.plot.value, self.leaderboard.value = header, plot, board
            self.lineage.value, self.hypotheses.value, self.log.value = lineage, hypotheses, log
            self._show_stage(snap)
            self.progress.max = max(1, snap.target)
            self.progress.value = min(snap.iterations_complete, self.progress.max)
            if status != "running":
                self.progress.bar_style = BAR_STYLES.get(status, "info")
                self.stop_button.disabled = True
                self.stop_button.description = status.capitalize()
            self._refresh_picker(snap)

    def _session_starts(self, snap) -> list[float]:
        """Where this session's candidates begin on the timing plot's x axis, when earlier sessions
        of the run (before a resume) already settled some."""
        started = self.result.started_at
        if started is None:
            return []
        before = sum(1 for c in snap.settled if (c.evaluated or c.created) < started)
        return [before + 0.5] if before else []

    def _refresh_picker(self, snap) -> None:
        written = [c for c in snap.candidates if c.kind not in BASELINE_KINDS][::-1]  # newest first
        options = [(panels.candidate_label(c), c.id) for c in written]
        chosen = options[0][1] if options and (self._follow_latest or self.picker.value is None) else self.picker.value
        self._picking = True
        try:
            if options != list(self.picker.options):
                self.picker.options = options
            self.picker.value = chosen
        finally:
            self._picking = False
        self.diff.value = panels.diff_html(snap, chosen)

