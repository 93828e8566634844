"""A run as a Python object: what `%%kernel_evolve` returns and `kscience.open_run` reopens.

    run = kscience.open_run("r-3f2a91bc", db="kscience.db")
    run.best.source, run.best.times        # the fastest correct kernel and its per-shape medians
    run.to_dataframe(); run.plot()         # every candidate; the timing plot
    run.wait(); run.stop()                 # for a run started in this kernel

Every property reads the store afresh, so the object is never stale: a run still going (here
or in another process writing the same database) shows its latest state each time it is asked.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from kscience.record.candidate import Candidate as StoredCandidate
from kscience.run.events import RunFailed, RunFinished, event_from_dict
from kscience.jupyter import panels
from kscience.jupyter.views import show_live
from kscience.record.liveness import display_status, run_is_alive
from kscience.run.driver import Run
from kscience.record.metrics import RunMetrics
from kscience.record.rows import RunRow
from kscience.record.snapshot import Snapshot
from kscience.record.text import US, fmt_us, fmt_x, kind_text
from kscience.record.store import Store, open_store

POLL_S = 1.0  # how often a run driven by another process is checked for new events


class Candidate(StoredCandidate):
    """One kernel the run produced, with its verdict (`times`: benchmark shape label -> median
    microseconds), shown as a line of text or, in a notebook, with its source."""

    def __repr__(self) -> str:
        us = f" {fmt_us(self.geomean_us, US)}" if self.geomean_us else ""
        return f"<Candidate {self.id} {kind_text(self.kind)} {self.status}{us}: {self.hypothesis[:60]}>"

    def _repr_html_(self) -> str:
        us = f", {fmt_us(self.geomean_us, US)}" if self.geomean_us else ""
        return (f"<div><b>{panels.esc(self.id)}</b> {panels.esc(kind_text(self.kind))} "
                f"({panels.esc(self.status)}{us}): "
                f"{panels.esc(self.hypothesis)}</div>" + panels.highlight(self.source, "python"))


class RunResult:
    """A stored run, optionally driven by this kernel (`run` given): then it can start, stop and wait."""

    def __init__(self, store: Store, run_id: str, run: Run | None = None):
        self.store, self.id = store, run_id
        self._run = run  # when this kernel drives the run
        self.started_at: float | None = None
        self.shown_live_in: int | None = None  # the cell (execution count) whose live dashboard shows this run
        store.run(run_id)  # an unknown id fails here, in one line

    # --- driving -----------------------------------------------------------------------------
    def start(self) -> "RunResult":
        """Run the controller on a thread of its own, so the kernel keeps handling messages
        (widget clicks included) while evaluations run."""
        if self._run is None:
            raise RuntimeError(f"run {self.id} is not driven by this kernel; resume it to continue it here")
        if self._run.started:
            raise RuntimeError(f"run {self.id} was already started")
        self.started_at = time.time()
        self._run.start(background=True)
        return self

    @property
    def driven_here(self) -> bool:
        """Whether this kernel drives the run (and so can stop it)."""
        return self._run is not None

    @property
    def live(self) -> bool:
        """Whether the run is going: on this kernel's thread, or in another process."""
        if self._run is not None:
            return self._run.running
        return run_is_alive(self.store.run(self.id))

    def stop(self) -> None:
        """End the run after the current evaluation; it can be resumed later."""
        if self._run is not None:
            self._run.stop()
        elif self.live:
            row = self.store.run(self.id)
            raise RuntimeError(f"run {self.id} is driven by process {row.pid} on {row.host}; stop it there")

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run ends (or `timeout` seconds) and return its status. An interrupt
        (the kernel's stop button, Ctrl-C) stops the run cleanly; a second one stops waiting."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stopping = False
        while self.live and (deadline is None or time.monotonic() < deadline):
            try:
                if self._run is not None:
                    self._run.wait(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
                else:
                    time.sleep(POLL_S)
            except KeyboardInterrupt:
                if stopping or not self.driven_here:
                    raise
                stopping = True
                self.stop()
                print(f"kscience: stopping run {self.id} after the current evaluation "
                      "(interrupt again to stop waiting)")
        return self.status

    def follow(self, on_change: Callable) -> Callable[[], None]:
        """Call `on_change(event)` for each new event of the run and `on_change(None)` once it is
        over (at once if it already is). Returns a function that stops following."""
        if self._run is not None:
            unsubscribe = self._run.subscribe(on_change)
            cancel = self._run.when_over(lambda: on_change(None))

            def stop_following() -> None:
                unsubscribe()
                cancel()

            return stop_following
        if not self.live:
            on_change(None)
            return lambda: None
        return self._poll(on_change)

    def _poll(self, on_change: Callable) -> Callable[[], None]:
        """Follow a run that another process drives, through the events it commits to the store."""
        quit_ = threading.Event()
        events = self.store.events(self.id)
        after = events[-1]["seq"] if events else 0

        def poll() -> None:
            nonlocal after
            while not quit_.wait(POLL_S):
                for row in self.store.events(self.id, after):
                    after = row["seq"]
                    event = event_from_dict(row["payload"])
                    on_change(event)
                    if isinstance(event, (RunFinished, RunFailed)):
                        on_change(None)
                        return
                if not run_is_alive(self.store.run(self.id)):  # killed without a word
                    on_change(None)
                    return

        threading.Thread(target=poll, name=f"kscience-follow-{self.id}", daemon=True).start()
        return quit_.set

    def watch(self, view: str = "auto"):
        """Show a live view of this run (see `kscience.jupyter.views.show_live`)."""
        return show_live(self, view)

    # --- reading -----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return Snapshot.load(self.store, self.id)

    @property
    def row(self) -> RunRow:
        return self.store.run(self.id)

    @property
    def status(self) -> str:
        """running, finished, stopped, failed, or interrupted (marked running, process gone)."""
        return display_status(self.row)

    @property
    def error(self) -> str | None:
        return self.row.error

    @property
    def problem(self) -> str:
        return self.row.problem

    @property
    def metrics(self) -> RunMetrics:
        """The run's numbers as `kscience show --json` reports them (`.to_dict()` is that JSON)."""
        return self.snapshot().metrics()

    @property
    def candidates(self) -> list[Candidate]:
        """Every candidate in the order it was written, the baselines (PyTorch eager, torch.compile) included."""
        return [Candidate.from_row(c.row) for c in self.store.candidates(self.id)]

    def candidate(self, candidate_id: str) -> Candidate:
        return Candidate.from_row(self.store.candidate(candidate_id).row)

    @property
    def best(self) -> Candidate | None:
        """The fastest correct kernel (the seed counts; the baselines do not)."""
        best = self.snapshot().best
        return Candidate.from_row(best.row) if best else None

    @property
    def seed(self) -> Candidate | None:
        seed = self.snapshot().seed
        return Candidate.from_row(seed.row) if seed else None

    @property
    def eager(self) -> Candidate | None:
        """The PyTorch eager baseline the run timed."""
        eager = self.snapshot().eager
        return Candidate.from_row(eager.row) if eager else None

    def to_dataframe(self):
        """One row per candidate (index: id) with its verdict and speedups over the seed and PyTorch eager."""
        import pandas as pd

        snap = self.snapshot()
        rows = []
        for c in snap.candidates:
            vs_seed, vs_ref = snap.speedups(c)
            rows.append({"id": c.id, "parent_id": c.parent_id, "kind": c.kind, "iteration": c.iteration,
                         "status": c.status, "geomean_us": c.geomean_us, "speedup_vs_seed": vs_seed,
                         "speedup_vs_eager": vs_ref, "hypothesis": c.hypothesis, "message": c.message})
        columns = ["id", "parent_id", "kind", "iteration", "status", "geomean_us", "speedup_vs_seed",
                   "speedup_vs_eager", "hypothesis", "message"]
        return pd.DataFrame(rows, columns=columns).set_index("id")

    def plot(self, ax=None, by: str = "evaluation"):
        """The timing plot on `ax` (a new pyplot figure if None); returns the Axes, like pandas."""
        from kscience.jupyter.plots import draw_timeline  # needs matplotlib

        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(8, 3.6), layout="constrained")
        draw_timeline(ax, self.snapshot(), by=by)
        return ax

    # --- display -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        snap = self.snapshot()
        best = snap.best
        text = f"<kscience run {self.id} ({snap.run.problem}): {display_status(snap.run)}"
        if best:
            vs_seed, _ = snap.speedups(best)
            text += f", best {best.id} {fmt_us(best.geomean_us, US)}"
            text += f" ({fmt_x(vs_seed)} vs seed)" if vs_seed else ""
        return text + ">"

    def _ipython_display_(self) -> None:
        """Shown as a cell's result: nothing in the cell whose live dashboard already stands for the
        run (a line there would be a frozen copy of what the dashboard keeps current), else the run."""
        from IPython import get_ipython
        from IPython.display import display

        shell = get_ipython()
        if self.shown_live_in is not None and shell is not None and shell.execution_count == self.shown_live_in:
            return
        display({"text/plain": repr(self), "text/html": self._repr_html_()}, raw=True)

    def _repr_html_(self) -> str:
        """A running run: one line (its live view is where it was started). An ended one: header,
        timing plot, leaderboard and the best kernel's source."""
        snap = self.snapshot()
        status = panels.esc(panels.stage_text(snap, None))
        if display_status(snap.run) == "running":
            return (f'<div style="{panels.BOX}">kscience run <b>{panels.esc(self.id)}</b> '
                    f'({panels.esc(snap.run.problem)}): {status}; {len(snap.settled)} candidate(s) settled so far. '
                    "Call <code>.wait()</code> for the final result.</div>")
        from kscience.jupyter.static import run_html  # needs matplotlib

        return run_html(snap)


def open_run(run_id: str, db: str | Path | None = None) -> RunResult:
    """Reopen a stored run. If another process is still driving it, views of it follow along."""
    return RunResult(open_store(db, create=False), run_id)
