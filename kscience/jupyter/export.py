"""The notebook's views outside a notebook: what the command line takes from this side, through this one
module (as the magics take the command line through its entry point), so a terminal user gets the same
pages and figures a notebook shows.

* `run_page`: a run as one standalone HTML page (the static view an ended dashboard leaves in a notebook,
  with every candidate and the run's log), for `kscience show RUN --html FILE`;
* `index_page`, `candidate_page`, `campaign_page`: what `kscience serve` answers, pages linked to each other;
* `write_run_figures` and `write_campaign_figures`: the report figures as PNG files, for `kscience figures`
  (`ReportError`: a run with nothing to draw).

Every function reads the store it is given; none writes to it.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from kscience.campaigns.report import campaign_figure, campaign_report, report_lines
from kscience.jupyter import panels
from kscience.jupyter.campaign_view import campaign_html
from kscience.jupyter.plots import png_bytes
from kscience.jupyter.report import ReportError, tracked_by_git, write_figures
from kscience.jupyter.static import run_html
from kscience.record.liveness import display_status
from kscience.record.snapshot import Snapshot, run_listing
from kscience.record.store import Store
from kscience.record.text import US, fmt_us, fmt_x, kind_text
from kscience.run.log import stored_log
from kscience.record.candidate import speedup

REFRESH_S = 10  # a served page of a run still going reloads itself this often


def _page(title: str, body: str, refresh: bool = False) -> str:
    head = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>{head}'
            f'</head><body style="{panels.BOX} max-width: 1400px; margin: 16px auto; padding: 0 16px;">{body}'
            "</body></html>\n")


def _link(href: str | None, text: str) -> str:
    return f'<a href="{html.escape(href)}">{html.escape(text)}</a>' if href else html.escape(text)


def run_page(store: Store, run_id: str, links: bool = False) -> str:
    """The run's static view with every candidate and its whole log; `links`: served, each candidate links to
    its own page and the page reloads while the run goes on."""
    snap = Snapshot.load(store, run_id)
    body = run_html(snap, limit=None, log=stored_log(store.events(run_id)))
    if links:
        body = f'<p>{_link("/", "all runs")}</p>{body}{_candidates_table(snap)}'
    live = display_status(snap.run) == "running"
    return _page(f"kscience run {run_id}: {Path(snap.run.problem).name}", body, refresh=links and live)


def _candidates_table(snap: Snapshot) -> str:
    rows = []
    for c in snap.candidates:
        vs_seed = fmt_x(speedup(snap.seed.geomean_us if snap.seed else None, c.geomean_us)) if c.ok else ""
        rows.append(f'<tr><td style="{panels.CELL}">{c.seq}</td>'
                    f'<td style="{panels.CELL}">{_link(f"/candidate/{c.id}", c.id)}</td>'
                    f'<td style="{panels.CELL}">{html.escape(kind_text(c.kind))}</td>'
                    f'<td style="{panels.CELL}">{html.escape(c.status)}</td>'
                    f'<td style="{panels.NUM}">{fmt_us(c.geomean_us, US) if c.ok else ""}</td>'
                    f'<td style="{panels.NUM}">{vs_seed}</td>'
                    f'<td style="{panels.CELL}">{html.escape(c.hypothesis)}</td></tr>')
    head = "".join(f'<th style="{panels.CELL}">{h}</th>' for h in ("#", "candidate", "kind", "status", "geomean",
                                                                   "vs seed", "hypothesis"))
    return f'<h3>every candidate</h3><table style="{panels.TABLE}"><tr>{head}</tr>{"".join(rows)}</table>'


def candidate_page(store: Store, candidate_id: str) -> str:
    """One candidate: its change from its parent (or its error) and its source."""
    cand = store.candidate(candidate_id)
    snap = Snapshot.load(store, cand.run_id)
    body = (f'<p>{_link("/", "all runs")} &middot; {_link(f"/run/{cand.run_id}", f"run {cand.run_id}")}</p>'
            f"<h3>{html.escape(cand.id)}: {html.escape(kind_text(cand.kind))}, {html.escape(cand.status)}</h3>"
            f"{panels.diff_html(snap, cand.id)}<h3>source</h3>{panels.highlight(cand.source, 'python')}")
    return _page(f"kscience candidate {cand.id}", body)


def index_page(store: Store) -> str:
    """Every run of the database, newest first, and its campaigns, each linking to its page."""
    runs = run_listing(store)
    head = "".join(f'<th style="{panels.CELL}">{h}</th>' for h in (
        "run", "problem", "status", "iterations", "candidates", "seed", "best", "vs seed", "timed on", "llm",
        "created"))
    rows = []
    for r in runs:
        run = r.run
        timed_on = "CPU interpreter" if r.interpreted else (r.device_name or "-")
        cells = [_link("/run/" + run.id, run.id), html.escape(Path(run.problem).name),
                 html.escape(display_status(run)), str(r.iterations_done), str(r.n_candidates),
                 fmt_us(r.seed_us, US), fmt_us(r.best_us, US), fmt_x(speedup(r.seed_us, r.best_us)),
                 html.escape(timed_on), html.escape(run.llm), time.strftime("%Y-%m-%d %H:%M", time.localtime(run.created))]
        rows.append("<tr>" + "".join(f'<td style="{panels.CELL}">{c}</td>' for c in cells) + "</tr>")
    campaigns = [f"<li>{_link('/campaign/' + c.id, c.id)} ({html.escape(c.status)}): "
                 f"{html.escape(c.suite)}</li>" for c in store.list_campaigns()]
    body = (f"<h2>kscience: {html.escape(str(store.path))}</h2>"
            + (f'<table style="{panels.TABLE}"><tr>{head}</tr>{"".join(rows)}</table>' if rows else "<p>no runs yet</p>")
            + (f"<h3>campaigns</h3><ul>{''.join(campaigns)}</ul>" if campaigns else ""))
    return _page(f"kscience: {store.path.name}", body, refresh=any(display_status(r.run) == "running" for r in runs))


def campaign_page(store: Store, campaign_id: str) -> str:
    """A campaign's table of problems and its report, as `kscience report` prints it."""
    runs = "".join(f"<li>{_link('/run/' + r.id, r.id)}: {html.escape(Path(r.problem).name)}</li>"
                   for r in store.campaign_runs(campaign_id))
    report = "\n".join(report_lines(campaign_report(store, campaign_id)))
    body = (f'<p>{_link("/", "all runs")}</p>{campaign_html(store, campaign_id)}<ul>{runs}</ul>'
            f'<pre style="{panels.CODE}">{html.escape(report)}</pre>')
    return _page(f"kscience campaign {campaign_id}", body)


def write_run_figures(store: Store, run_id: str, out: str | Path, command: str,
                      overwrite: bool = False) -> list[Path]:
    """The report figures of one run (timing, shapes, lineage, uplift, speed of light) into `out`; a file git
    tracks is replaced only with `overwrite` (write_figures refuses otherwise)."""
    if not Snapshot.load(store, run_id).evaluated:
        raise ReportError(f"run {run_id} has no evaluated candidate to draw")
    return write_figures(store.path, out, run_id, command, overwrite)


def write_campaign_figures(store: Store, campaign_id: str, out: str | Path, command: str,
                           overwrite: bool = False) -> list[Path]:
    """The campaign's figure (speedups per problem, fast_p) and every one of its runs' report figures."""
    out = Path(out).expanduser()
    path = out / f"campaign-{campaign_id}.png"
    if not overwrite and tracked_by_git([path] if path.exists() else []):
        raise ReportError(f"{path} is a file git tracks: write elsewhere, or replace it on purpose with --overwrite")
    out.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(campaign_figure(campaign_report(store, campaign_id)), Source=command,
                               Title=f"campaign {campaign_id}"))
    written = [path]
    for run in store.campaign_runs(campaign_id):
        if Snapshot.load(store, run.id).evaluated:
            written += write_figures(store.path, out, run.id, command, overwrite)
    return written
