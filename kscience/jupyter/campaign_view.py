"""A compact live view of a campaign in a notebook: one row per problem, updated in place.

    campaign = %kscience campaign level1/ --iterations 2 --llm offline
    campaign.wait()                      # blocks until every problem is done (papermill does this)

The table is a display (HTML, and plain text for papermill and consoles) updated through its
display id, which JupyterLab, Notebook, papermill and nbconvert all honour; updates from the
campaign's thread are throttled to one a second, and the last one is always drawn.
"""

from __future__ import annotations

import html
import threading
import time

from kscience.campaigns.report import problem_rows, speedup
from kscience.record.text import fmt_us, fmt_x

MIN_INTERVAL_S = 1.0
COLUMNS = ("problem", "status", "eager us", "best us", "vs eager", "attempts", "note")


def _cells(row: dict) -> list[str]:
    gain = speedup(row, "eager")
    note = row["reason"] if row["status"] in ("skipped", "failed") and row["reason"] else ""
    return [row["name"], row["status"], fmt_us(row["eager_us"]) if row["eager_us"] else "",
            fmt_us(row["best_us"]) if row["best_us"] else "", fmt_x(gain) if gain else "",
            str(row["attempts"]), note[:120]]


def _table(store, campaign_id: str) -> tuple[str, list[list[str]]]:
    """The view's title (campaign, status, problems done) and one row of cells per problem."""
    campaign = store.campaign(campaign_id)
    rows = problem_rows(store, campaign_id)
    done = sum(r["status"] in ("finished", "failed", "skipped") for r in rows)
    return f"campaign {campaign_id} ({campaign['status']}, {done}/{len(rows)} done)", [_cells(r) for r in rows]


def campaign_html(store, campaign_id: str) -> str:
    title, rows = _table(store, campaign_id)
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{c}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td style='padding:0 8px'>{html.escape(c)}</td>" for c in cells) + "</tr>"
                   for cells in rows)
    return f"<div><b>{html.escape(title)}</b><table>{head}{body}</table></div>"


def campaign_text(store, campaign_id: str) -> str:
    """The same table as plain text in aligned columns: what papermill, nbconvert to text and a
    terminal console show."""
    title, rows = _table(store, campaign_id)
    widths = [max(len(c) for c in column) for column in zip(COLUMNS, *rows)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in (COLUMNS, *rows)]
    return "\n".join([title, *lines])


def _bundle(store, campaign_id: str) -> dict[str, str]:
    return {"text/plain": campaign_text(store, campaign_id), "text/html": campaign_html(store, campaign_id)}


class CampaignView:
    def __init__(self, campaign):
        from IPython.display import display

        self.campaign = campaign
        self._lock, self._last = threading.Lock(), 0.0
        self.handle = display(_bundle(campaign.store, campaign.id), raw=True, display_id=True)
        campaign.subscribe(self._changed)

    def _changed(self, campaign, row, event) -> None:
        # Problem changes always redraw; candidate events at most once a second.
        now = time.monotonic()
        if event is not None and now - self._last < MIN_INTERVAL_S:
            return
        self.refresh()

    def refresh(self) -> None:
        with self._lock:
            self._last = time.monotonic()
            self.handle.update(_bundle(self.campaign.store, self.campaign.id), raw=True)
