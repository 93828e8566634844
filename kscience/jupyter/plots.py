"""Matplotlib drawings of a run: timing over the run, per-shape speedups, lineage, predicted vs measured.

Every function draws into an Axes it is given, so the same drawing serves the dashboard (a
`matplotlib.figure.Figure` rendered to PNG off the main thread, never touching pyplot's global
state), `RunResult.plot()` and the report script. Nothing is drawn that the store does not hold:
a baseline the run did not measure appears in the legend as missing instead of as a line.
"""

from __future__ import annotations

import io
import math

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator

from kscience.problems import shape_label
from kscience.record.snapshot import Snapshot
from kscience.record.candidate import Candidate, speedup
from kscience.record.text import US, fmt_sol, fmt_us, fmt_x

STATUS_COLOURS = {
    "ok": "#2e7d32", "wrong_answer": "#ef6c00", "compile_error": "#c62828", "runtime_error": "#8e24aa",
    "timeout": "#6d4c41", "crashed": "#212121", "rejected": "#757575", "write_failed": "#ec407a",
}
BASELINE_STYLES = {  # label -> (colour, line style)
    "PyTorch eager": ("#1565c0", "--"),
    "torch.compile": ("#6a1b9a", ":"),
    "vendor library": ("#00838f", (0, (5, 1, 1, 1))),
    "physical floor": ("#000000", "-."),
}
LIBRARY_STYLE = ("#ad1457", (0, (1, 1)))  # an installed library (Liger-Kernel, QuACK...), named on its line
BEST_RING = "#ffb300"
FAILED_BAND = 0.96  # failed candidates have no time: they sit on a strip at the top of the axes


def _colour(status: str) -> str:
    return STATUS_COLOURS.get(status, "#9e9e9e")


def _x_positions(snap: Snapshot, by: str) -> list[float]:
    """x of each settled candidate: its evaluation number, or its iteration spread a little so
    the candidates of one iteration do not hide each other."""
    if by == "evaluation":
        return [i + 1 for i in range(len(snap.settled))]
    per_iteration: dict[int, list[int]] = {}
    for i, c in enumerate(snap.settled):
        per_iteration.setdefault(c.iteration, []).append(i)
    xs = [0.0] * len(snap.settled)
    for iteration, members in per_iteration.items():
        width = min(0.6, 0.12 * (len(members) - 1))
        for k, i in enumerate(members):
            xs[i] = iteration + (width * (k / (len(members) - 1) - 0.5) if len(members) > 1 else 0.0)
    return xs


def _best_steps(snap: Snapshot, by: str) -> tuple[list[float], list[float]]:
    """The best-so-far staircase, ending at the last settled candidate (never past the data)."""
    if by == "evaluation":
        steps = snap.best_so_far()
        xs, ys = [i + 1 for i, _ in steps], [us for _, us in steps]
        end = float(len(snap.settled))
    else:
        xs, ys, best = [], [], None
        for iteration in sorted({c.iteration for c in snap.correct}):
            us = min(c.geomean_us for c in snap.correct if c.iteration == iteration)
            if best is None or us < best:
                best = us
                xs.append(iteration)
                ys.append(us)
        end = max(_x_positions(snap, by), default=0.0)  # the rightmost point of the last iteration
    if xs and end > xs[-1]:  # hold the last best up to the last candidate
        xs.append(end)
        ys.append(ys[-1])
    return xs, ys


LEGEND_FONT = 9
SPAN_FOR_LOG = 20  # candidates spanning more than this factor in time get a log axis


OFF_SCALE = 10  # a baseline more than this factor beyond the candidates' times is drawn as an arrow


def _on_scale(us: float, low: float | None, high: float | None) -> bool:
    return low is None or low / OFF_SCALE <= us <= high * OFF_SCALE


def _baseline(ax, label: str, us: float, on_scale: bool) -> None:
    """A baseline as a horizontal line where the axis shows it, else as an arrow at the edge,
    labelled with its time, so it does not squeeze the candidates."""
    colour, style = BASELINE_STYLES.get(label, LIBRARY_STYLE)
    text = f"{label} {fmt_us(us, US)}"
    if on_scale:
        ax.axhline(us, color=colour, linestyle=style, linewidth=1.4, label=text)
        return
    above = us > ax.get_ylim()[1]
    y = 0.97 if above else 0.03
    ax.annotate(f"{text} {'↑' if above else '↓'} (off scale)", xy=(0.99, y), xycoords="axes fraction",
                ha="right", va="top" if above else "bottom", fontsize=LEGEND_FONT - 1, color=colour)
    ax.plot([], [], color=colour, linestyle=style, linewidth=1.4, label=f"{text} (off scale)")


def draw_timeline(ax, snap: Snapshot, by: str = "evaluation", session_starts: list[float] = ()) -> None:
    """Every candidate as a point coloured by status, the best-so-far line and the baselines.
    `by` is "evaluation" (x = the order verdicts arrived) or "iteration" (x = design round).
    `session_starts`: x positions where a resumed session began, each marked by a labelled line.
    The y axis fits the candidates; a baseline far outside them is an arrow at the edge."""
    xs = _x_positions(snap, by)
    statuses = sorted({c.status for c in snap.settled}, key=lambda s: (s != "ok", s))
    for status in statuses:
        points = [(x, c) for x, c in zip(xs, snap.settled, strict=True) if c.status == status]
        if status == "ok":
            ax.scatter([x for x, _ in points], [c.geomean_us for _, c in points], s=30, color=_colour(status),
                       label="correct kernel", zorder=3)
        else:
            ax.scatter([x for x, _ in points], [FAILED_BAND] * len(points), s=30, marker="x",
                       color=_colour(status), label=f"{status.replace('_', ' ')} (no time)",
                       transform=ax.get_xaxis_transform(), zorder=3, clip_on=False)
    bx, by_ = _best_steps(snap, by)
    if bx:
        ax.step(bx, by_, where="post", color="#2e7d32", linewidth=1.6, alpha=0.8, label="best so far", zorder=2)

    base = snap.baselines()
    values = [c.geomean_us for c in snap.correct]
    low, high = (min(values), max(values)) if values else (None, None)
    vendor = snap.vendor
    vendor_us = vendor.geomean_us if vendor and vendor.status == "ok" else None
    baselines = [(label, us) for label, us in (("PyTorch eager", base.eager_us), ("torch.compile", base.compile_us),
                                                ("vendor library", vendor_us), ("physical floor", base.floor_us),
                                                *((c.hypothesis.split(";")[0], c.geomean_us)
                                                  for c in snap.libraries if c.status == "ok")) if us]
    values += [us for _, us in baselines if _on_scale(us, low, high)]  # the axis is fitted to these
    for k, x in enumerate(session_starts):
        ax.axvline(x, color="#616161", linestyle=(0, (4, 3)), linewidth=1.0, zorder=1,
                   label="resumed session starts" if k == 0 else None)
        ax.annotate("resumed", xy=(x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                    textcoords="offset points", ha="left", va="top", fontsize=LEGEND_FONT - 1, color="#616161")
    if values and max(values) / min(values) > SPAN_FOR_LOG:
        ax.set_yscale("log")
        ax.set_ylim(min(values) / 1.3, max(values) * 1.3)
    elif values:
        ax.set_ylim(0, max(values) * 1.12)  # a linear time axis starts at zero, so gaps read true
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if max(values) >= 100 else f"{v:g}"))
    # A baseline the axis reaches is a line (a linear axis from zero reaches any faster one); only one
    # beyond the axis is an arrow at its edge.
    bottom, top = ax.get_ylim()
    for label, us in baselines:
        _baseline(ax, label, us, on_scale=bottom <= us <= top)
    ax.set_ylim(bottom, top)
    handles, labels = ax.get_legend_handles_labels()
    for note in base.missing():  # say which lines are missing rather than leave the reader guessing
        handles.append(Line2D([], [], linestyle="none"))
        labels.append(note)
    ax.set_xlabel("evaluation (order of verdicts)" if by == "evaluation" else "iteration (design round)")
    ax.set_ylabel("geomean time over shapes (us)")
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if xs:
        ax.set_xlim(min(0.5, min(xs) - 0.5), max([*xs, *session_starts]) + 0.5)
    if not snap.settled:
        ax.text(0.5, 0.5, "no candidate evaluated yet", ha="center", va="center", transform=ax.transAxes,
                color="#757575")
    ax.legend(handles, labels, fontsize=LEGEND_FONT, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def draw_shape_speedups(ax, snap: Snapshot) -> None:
    """Per benchmark shape: the best kernel's speedup over the seed, PyTorch eager and torch.compile,
    on a log axis (speedups of 1.02x and 1000x side by side), 1x marked as "as fast"."""
    best = snap.best
    if best is None:
        ax.text(0.5, 0.5, "no correct kernel", ha="center", va="center", transform=ax.transAxes)
        return
    times = best.times
    labels = list(times)
    bases = (("vs seed", snap.seed), ("vs PyTorch eager", snap.eager), ("vs torch.compile", snap.compiled))
    series = [(name, base.times) for name, base in bases if base and base.ok]
    width = 0.8 / max(1, len(series))
    crowded = len(labels) > 8  # fp8's 18 shapes: a wider figure, labels standing up
    if crowded:
        w, h = ax.figure.get_size_inches()
        ax.figure.set_size_inches(max(w, 0.7 * len(labels)), h * 1.2)
    ratios_seen = []
    for k, (name, base_times) in enumerate(series):
        ratios = [speedup(base_times.get(s), times[s]) for s in labels]
        ratios_seen += [r for r in ratios if r]
        positions = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        # Bars grow from 1x (as fast), up for faster and down for slower, so none is invisible.
        bars = ax.bar(positions, [(r - 1.0) if r else 0.0 for r in ratios], bottom=1.0, width=width,
                      label=name, color=("#2e7d32", "#1565c0", "#6a1b9a")[k])
        # Standing labels: side by side bars of near 1x would otherwise print over each other.
        ax.bar_label(bars, labels=[fmt_x(r) if r else "n/a" for r in ratios], fontsize=7 if crowded else 8,
                     rotation=90, padding=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(_two_and_five))
    if ratios_seen:
        ax.set_ylim(min(0.8, min(ratios_seen) / 1.8), max(1.25, max(ratios_seen) * 2.2))
    ax.axhline(1.0, color="#424242", linewidth=1, label="1x: as fast")
    ax.set_xticks(range(len(labels)), labels, rotation=35 if crowded else 20, ha="right", fontsize=8 if crowded else 9)
    ax.set_xlabel("benchmark shape")
    ax.set_ylabel("speedup of the best kernel (×, log)")
    title = f"best kernel {best.id}: {fmt_us(best.geomean_us, US)} geomean"
    if snap.seed is not None and best.id == snap.seed.id:
        title += "\nno candidate beat the seed, so the best kernel is the seed (1x vs seed)"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=LEGEND_FONT, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3, which="both")


def _two_and_five(v: float, _pos) -> str:
    """Minor log-axis labels at 2x and 5x of each decade (0.2x, 0.5x, 2x, 5x, 20x...)."""
    if v <= 0:
        return ""
    lead = v / 10 ** math.floor(math.log10(v) + 1e-9)
    return f"{v:g}x" if round(lead, 6) in (2.0, 5.0) else ""


def draw_speed_of_light(ax, snap: Snapshot) -> None:
    """Per benchmark shape: the fraction of the roofline bound the best kernel and the seed reach
    (1.0 is the bound: bytes at peak bandwidth or FLOPs at peak rate, whichever is larger)."""
    best = snap.best
    rows = snap.sol(best)
    if not rows:
        ax.text(0.5, 0.5, "no roofline bound (CPU interpreter, unknown device or no correct kernel)",
                ha="center", va="center", transform=ax.transAxes, color="#757575", fontsize=8)
        return
    labels = [shape_label(r.shape) for r in rows]
    seed = {shape_label(r.shape): r.fraction for r in snap.sol(snap.seed)}
    series = [(f"best {best.id}", [r.fraction for r in rows], "#2e7d32")]
    if seed and snap.seed.id != best.id:
        series.append(("seed", [seed.get(label, 0.0) for label in labels], "#9e9e9e"))
    width = 0.8 / len(series)
    for k, (name, values, colour) in enumerate(series):
        positions = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        bars = ax.bar(positions, values, width=width, label=name, color=colour)
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], fontsize=7, padding=2)
    ax.axhline(1.0, color="#000000", linewidth=1, linestyle="-.", label="roofline bound")
    ax.set_ylim(0, max(1.1, max(v for _, values, _ in series for v in values) * 1.1))
    bounds = [r.bound for r in rows]
    ax.set_xticks(range(len(labels)), [f"{label}\n({b})" for label, b in zip(labels, bounds)],
                  rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("fraction of speed of light")
    ax.set_title(f"best kernel {best.id}: {fmt_sol(snap.sol_summary(best))}", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    ax.grid(axis="y", alpha=0.3)


def lineage_layout(snap: Snapshot) -> dict[str, tuple[float, float]]:
    """(generation, row) of every candidate: leaves get consecutive rows, a parent sits at the
    middle of its children, so the tree reads left (seed) to right (newest)."""
    tree, pos, next_row = snap.children(), {}, [0.0]

    def place(c: Candidate, depth: int) -> float:
        kids = tree.get(c.id, [])
        rows = [place(k, depth + 1) for k in kids]
        row = sum(rows) / len(rows) if rows else next_row[0]
        if not rows:
            next_row[0] += 1
        pos[c.id] = (float(depth), row)
        return row

    for root in tree.get(None, []):
        place(root, 0)
    return pos


def draw_lineage(ax, snap: Snapshot) -> None:
    """The lineage tree: an edge per parent -> child, nodes coloured by status and labelled with
    their id, time and hypothesis, the best ringed (and the ring in the legend)."""
    pos = lineage_layout(snap)
    best = snap.best
    for c in snap.candidates:
        if c.id in pos and c.parent_id in pos:
            (x0, y0), (x1, y1) = pos[c.parent_id], pos[c.id]
            ax.plot([x0, x1], [y0, y1], color="#bdbdbd", linewidth=1, zorder=1)
    label_all = len(pos) <= 40
    for cid, (x, y) in pos.items():
        c = snap.by_id[cid]
        is_best = best is not None and cid == best.id
        ax.scatter([x], [y], s=150 if is_best else 60, color=_colour(c.status), zorder=3,
                   edgecolors=BEST_RING if is_best else "white", linewidths=2.5 if is_best else 0.5)
        if label_all or is_best:
            time_text = fmt_us(c.geomean_us, US) if c.status == "ok" and c.geomean_us \
                else c.status.replace("_", " ")
            hypothesis = _short(c.hypothesis or c.kind, 34)
            ax.annotate(f"{cid}  {time_text}\n{hypothesis}", (x, y), xytext=(8, 0), textcoords="offset points",
                        fontsize=8, va="center", linespacing=1.1)
    ax.set_xlabel("generation (edits from the seed)")
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    if pos:  # room for the labels right of the newest generation
        depth = max(x for x, _ in pos.values())
        rows = max(y for _, y in pos.values())
        ax.set_xlim(-0.3, depth + 1.2)
        ax.set_ylim(-0.7, rows + 0.7)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    handles = [Line2D([], [], marker="o", linestyle="none", color=_colour(s), label=s.replace("_", " "))
               for s in sorted({snap.by_id[cid].status for cid in pos})]
    if best is not None:
        handles.append(Line2D([], [], marker="o", linestyle="none", color="white", markeredgecolor=BEST_RING,
                              markeredgewidth=2.5, markersize=10, label=f"best kernel ({best.id})"))
    ax.legend(handles=handles, fontsize=LEGEND_FONT, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def draw_uplift(ax, snap: Snapshot) -> None:
    """Predicted uplift range (horizontal bar) against the measured uplift, with the y = x diagonal.
    Uplift is the child's speedup over its base in percent: +25% = 1.25x as fast, negative = slower."""
    points = snap.predictions()
    measured = [p for p in points if p.measured is not None]
    span = max([abs(p.measured) for p in measured] + [1.0])
    previous, left_used = None, False
    for p in sorted(measured, key=lambda p: p.measured):
        mid = (p.low + p.high) / 2
        ax.errorbar([mid], [p.measured], xerr=[[mid - p.low], [p.high - mid]], fmt="o", capsize=3,
                    color="#2e7d32" if p.inside else "#ef6c00", zorder=3)
        # Each point is named by its kernel, beyond an end of its range bar: the right end, or the
        # left one where the point below is close enough for the two names to collide.
        left = previous is not None and p.measured - previous < 0.08 * span and not left_used
        left_used = left
        ax.annotate(p.candidate_id or _short(p.title, 20), (p.low if left else p.high, p.measured),
                    xytext=(-5 if left else 5, 0), textcoords="offset points", ha="right" if left else "left",
                    va="center", fontsize=8, color="#424242")
        previous = p.measured
    lows = [v for p in measured for v in (p.low, p.high, p.measured)]
    if lows:
        lo, hi = min(lows + [0.0]), max(lows + [0.0])
        ax.plot([lo, hi], [lo, hi], color="#757575", linewidth=1, linestyle="--", label="measured = predicted")
    ax.axhline(0, color="#bdbdbd", linewidth=0.8)
    ax.axvline(0, color="#bdbdbd", linewidth=0.8)
    ax.set_xlabel("predicted uplift (%): range and its midpoint")
    ax.set_ylabel("measured uplift (%)\n(+25 = 1.25x as fast as its base; < 0 slower)")
    failed = len(points) - len(measured)
    ax.set_title(f"{len(measured)} experiment(s) measured"
                 + (f", {failed} without a correct kernel (not shown)" if failed else ""), fontsize=9)
    handles, _ = ax.get_legend_handles_labels()
    keys = [Line2D([], [], marker="o", linestyle="none", color=colour, label=f"{where} prediction")
            for where, colour, inside in (("inside", "#2e7d32", True), ("outside", "#ef6c00", False))
            if any(p.inside == inside for p in measured)]  # a key only for points that are drawn
    ax.legend(handles=[*keys, *handles], fontsize=LEGEND_FONT, frameon=False, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)


def timeline_figure(snap: Snapshot, by: str = "evaluation", size=(7.5, 3.4), dpi: int = 100,
                    session_starts: list[float] = ()) -> Figure:
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    draw_timeline(fig.add_subplot(), snap, by=by, session_starts=session_starts)
    return fig


def png_bytes(fig: Figure, **metadata) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata=metadata or None)
    return buf.getvalue()
