"""Showing a run live in a notebook: the widget dashboard where widgets render, else a text
summary that updates in place (kscience.jupyter.live.choose_view decides which)."""

from __future__ import annotations

from kscience.jupyter.headless import TextSummary
from kscience.jupyter.live import choose_view


def show_live(result, view: str = "auto", start: bool = False) -> None:
    """Display a view that follows `result` (a RunResult); start the run if asked. A text view
    returns when the run ends; the dashboard at once."""
    from IPython import get_ipython
    from IPython.display import display  # IPython and ipywidgets: the jupyter extra

    if choose_view(view) == "widgets":
        from kscience.jupyter.dashboard import Dashboard  # needs ipywidgets

        board = Dashboard(result)
        display(board, display_id=board.display_id)
        result.shown_live_in = get_ipython().execution_count
        board.shown()
        if start:
            result.start()
        return
    summary = TextSummary(result)
    summary.show()
    if start:
        result.start()
    summary.block()
