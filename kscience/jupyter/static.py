"""A run as one static HTML block: what an ended run shows in place of its live dashboard.

A saved notebook keeps a widget's output only as a reference to a model in the kernel, so once
the kernel is gone JupyterLab shows "model not found" there. When a run ends, its dashboard's
output is therefore replaced by this block, which needs no kernel: header, final status, timing
plot, leaderboard, hypotheses and the best kernel's diff, all with inline styles.
"""

from __future__ import annotations

import base64

from kscience.jupyter import panels
from kscience.jupyter.plots import png_bytes, timeline_figure
from kscience.record.snapshot import Snapshot


def timeline_png(snap: Snapshot) -> str:
    """The timing plot as base64 PNG, for an <img> that needs no kernel."""
    return base64.b64encode(png_bytes(timeline_figure(snap))).decode("ascii")


def run_html(snap: Snapshot, limit: int | None = 10, log: list[str] | None = None) -> str:
    """Header, status line, timing plot, leaderboard (its `limit` best rows; None: every row), hypotheses, the
    best kernel's change and, given, the run's log."""
    status = panels.esc(panels.stage_text(snap, None))
    parts = [f'<div class="kscience-summary" style="{panels.BOX}">', panels.header_html(snap),
             f'<div class="kscience-status" style="margin: 4px 0;"><b>status</b> {status}</div>']
    if snap.settled:
        parts.append(f'<img alt="timing plot" style="max-width: 100%;" '
                     f'src="data:image/png;base64,{timeline_png(snap)}"/>')
    parts.append(panels.leaderboard_html(snap, limit=limit))
    if snap.plans:
        parts.append(f'<details><summary>hypotheses ({len(snap.plans)})</summary>{panels.hypotheses_html(snap)}'
                     '</details>')
    if snap.best:
        parts.append(f'<details><summary>best kernel {panels.esc(snap.best.id)}: change from its parent'
                     f'</summary>{panels.diff_html(snap, snap.best.id)}</details>')
    if log:
        parts.append(f"<details><summary>log ({len(log)} lines)</summary>{panels.log_html(log)}</details>")
    return "".join(parts) + "</div>"
