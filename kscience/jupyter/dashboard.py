"""The live dashboard (ipywidgets 8): header, timing plot, hypotheses, diffs, leaderboard, Stop.

Events arrive on the run's thread. The handler only notes the stage and pokes a throttle; the
throttle redraws from a fresh store snapshot at most a few times a second, on a timer thread, so
neither the run nor the kernel waits for matplotlib. Widget updates leave the kernel at any time,
from any thread; a click comes back as a message the kernel handles only when no cell is running.
The cell that started the run has returned by then, so Stop reaches `Run.stop` at once.
"""

from __future__ import annotations

import threading

import ipywidgets as W

from kscience.events import EvaluationWaiting, StageChanged
from kscience.jupyter import panels
from kscience.jupyter.live import Throttle
from kscience.jupyter.plots import png_bytes, timeline_figure
from kscience.liveness import display_status
from kscience.store import BASELINE_KINDS

BAR_STYLES = {"finished": "success", "stopped": "warning", "failed": "danger", "interrupted": "danger"}


def _panel(title: str, *children, width: str = "50%") -> W.VBox:
    heading = W.HTML(f'<div style="font-weight: 600; font-size: 13px; margin: 4px 0;">{title}</div>')
    return W.VBox([heading, *children], layout=W.Layout(width=width, padding="0 8px 0 0"))


class Dashboard:
    """A live view of one run; `widget` is what to display. Works for any run: one this kernel
    drives (Stop enabled), one another process drives (followed through the store), or an ended
    one (a static but browsable view)."""

    def __init__(self, result, refresh_s: float = 0.4):
        self.result = result
        self._stage: dict | None = None
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
        self.plot = W.Image(format="png", layout=W.Layout(width="100%"))
        self.plot.add_class("kscience-plot")
        self.leaderboard = W.HTML(layout=W.Layout(max_height="300px", overflow="auto"))
        self.lineage = W.HTML()
        self.hypotheses = W.HTML(layout=W.Layout(max_height="460px", overflow="auto"))
        self.hypotheses.add_class("kscience-hypotheses")
        self.picker = W.Dropdown(options=[], layout=W.Layout(width="98%"))
        self.picker.observe(self._picked, names="value")
        self.diff = W.HTML(layout=W.Layout(max_height="460px", overflow="auto"))
        self.diff.add_class("kscience-diffs")

        controls = W.HBox([self.stop_button, self.progress, self.stage], layout=W.Layout(align_items="center"))
        self.widget = W.VBox([
            self.header, controls,
            W.HBox([_panel("Timing", self.plot, width="60%"),
                    _panel("Leaderboard", self.leaderboard, W.HTML("<b>Lineage</b>"), self.lineage, width="40%")]),
            W.HBox([_panel("Hypotheses", self.hypotheses),
                    _panel("Diff (parent &rarr; child)", self.picker, self.diff)]),
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
            return
        if isinstance(event, (StageChanged, EvaluationWaiting)):
            self._stage = panels.stage_of(event)
            self._show_stage()  # cheap, so it is not throttled
        self._throttle.poke()

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
            text = panels.stage_text(snap, self._stage, self._stopping)
            self.stage.value = f'<span style="{panels.BOX}">{panels.esc(text)}</span>'

    def _session_s(self, snap) -> float | None:
        started = self.result.started_at
        if started is None:
            return None
        end = snap.taken_at if display_status(snap.run) == "running" else snap.run["updated"]
        return max(0.0, end - started)

    def render(self) -> None:
        """Redraw every panel from one snapshot, so they never disagree with each other."""
        with self._render_lock:
            snap = self.result.snapshot()
            status = display_status(snap.run)
            self.header.value = panels.header_html(snap, self._session_s(snap))
            self._show_stage(snap)
            self.progress.max = max(1, snap.target)
            self.progress.value = min(snap.iterations_complete, self.progress.max)
            if status != "running":
                self.progress.bar_style = BAR_STYLES.get(status, "info")
                self.stop_button.disabled = True
                self.stop_button.description = status.capitalize()
            self.plot.value = png_bytes(timeline_figure(snap))
            self.leaderboard.value = panels.leaderboard_html(snap)
            self.lineage.value = panels.lineage_html(snap)
            self.hypotheses.value = panels.hypotheses_html(snap)
            self._refresh_picker(snap)

    def _refresh_picker(self, snap) -> None:
        written = [c for c in snap.candidates if c["kind"] not in BASELINE_KINDS][::-1]  # newest first
        options = [(panels.candidate_label(c), c["id"]) for c in written]
        chosen = options[0][1] if options and (self._follow_latest or self.picker.value is None) else self.picker.value
        self._picking = True
        try:
            if options != list(self.picker.options):
                self.picker.options = options
            self.picker.value = chosen
        finally:
            self._picking = False
        self.diff.value = panels.diff_html(snap, chosen)

