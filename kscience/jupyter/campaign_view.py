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
from kscience.campaigns.report_rows import ProblemRow
from kscience.campaigns.usage import CampaignUsage, campaign_usage
from kscience.record.text import fmt_duration, fmt_us, fmt_x

MIN_INTERVAL_S = 1.0
COLUMNS = ("problem", "status", "eager us", "best us", "vs eager", "attempts", "wall", "busy", "GPU-h", "tokens",
           "$", "note")


def _usage_cells(usage: ProblemRow | CampaignUsage) -> list[str]:
    """Wall time, busy fraction, GPU-hours, tokens and $ (kscience.campaigns.usage), of a problem or in total."""
    return [fmt_duration(usage.wall_s) if usage.wall_s is not None else "",
            f"{usage.busy:.2f}" if usage.busy is not None else "",
            f"{usage.gpu_hours:.3f}" if usage.gpu_hours is not None else "",
            f"{usage.tokens or 0:,}", f"{usage.cost_usd or 0.0:.2f}"]


def _cells(row: ProblemRow) -> list[str]:
    gain = speedup(row, "eager")
    note = row.reason if row.status in ("skipped", "failed") and row.reason else ""
    return [row.name, row.status, fmt_us(row.eager_us) if row.eager_us else "",
            fmt_us(row.best_us) if row.best_us else "", fmt_x(gain) if gain else "",
            str(row.attempts), *_usage_cells(row), note[:120]]


def _table(store, campaign_id: str) -> tuple[str, list[list[str]]]:
    """The view's title (campaign, status, problems done, how many at once) and one row of cells per problem,
    then the campaign's totals."""
    campaign = store.campaign(campaign_id)
    rows = problem_rows(store, campaign_id)
    total = campaign_usage(store, campaign_id, rows)
    at_once = (f", {total.problems_at_once} at once on {total.slots} slot(s)"
               if total.problems_at_once else "")
    done = sum(r.status in ("finished", "failed", "skipped") for r in rows)
    cells = [_cells(r) for r in rows] + [["total", "", "", "", "", "", *_usage_cells(total), ""]]
    return f"campaign {campaign_id} ({campaign.status}, {done}/{len(rows)} done{at_once})", cells


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
