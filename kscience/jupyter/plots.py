"""Matplotlib drawings of a run: timing over the run, per-shape speedups, lineage, predicted vs measured.

Every function draws into an Axes it is given, so the same drawing serves the dashboard (a
`matplotlib.figure.Figure` rendered to PNG off the main thread, never touching pyplot's global
state), `RunResult.plot()` and the report script. Nothing is drawn that the store does not hold:
a baseline the run did not measure appears in the legend as missing instead of as a line.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from kscience.problems import shape_label
from kscience.snapshot import Snapshot, fmt_sol, fmt_us, fmt_x, shape_times, speedup

STATUS_COLOURS = {
    "ok": "#2e7d32", "wrong_answer": "#ef6c00", "compile_error": "#c62828", "runtime_error": "#8e24aa",
    "timeout": "#6d4c41", "crashed": "#212121", "rejected": "#757575", "write_failed": "#ec407a",
}
BASELINE_STYLES = {  # label -> (colour, line style)
    "PyTorch eager": ("#1565c0", "--"),
    "torch.compile": ("#6a1b9a", ":"),
    "physical floor": ("#000000", "-."),
}
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
        per_iteration.setdefault(c["iteration"], []).append(i)
    xs = [0.0] * len(snap.settled)
    for iteration, members in per_iteration.items():
        width = min(0.6, 0.12 * (len(members) - 1))
        for k, i in enumerate(members):
            xs[i] = iteration + (width * (k / (len(members) - 1) - 0.5) if len(members) > 1 else 0.0)
    return xs


def _best_steps(snap: Snapshot, by: str) -> tuple[list[float], list[float]]:
    if by == "evaluation":
        steps = snap.best_so_far()
        xs, ys = [i + 1 for i, _ in steps], [us for _, us in steps]
        end = len(snap.settled)
    else:
        xs, ys, best = [], [], None
        for iteration in sorted({c["iteration"] for c in snap.correct}):
            us = min(c["geomean_us"] for c in snap.correct if c["iteration"] == iteration)
            if best is None or us < best:
                best = us
                xs.append(iteration)
                ys.append(us)
        # to the right edge of the last iteration's spread of points
        end = max([snap.iterations_done, *xs]) + 0.4 if xs else 0
    if xs and end > xs[-1]:  # carry the last best to the right edge
        xs.append(end)
        ys.append(ys[-1])
    return xs, ys


def draw_timeline(ax, snap: Snapshot, by: str = "evaluation") -> None:
    """Every candidate as a point coloured by status, the best-so-far line and the baselines.
    `by` is "evaluation" (x = the order verdicts arrived) or "iteration" (x = design round)."""
    xs = _x_positions(snap, by)
    statuses = sorted({c["status"] for c in snap.settled}, key=lambda s: (s != "ok", s))
    for status in statuses:
        points = [(x, c) for x, c in zip(xs, snap.settled, strict=True) if c["status"] == status]
        if status == "ok":
            ax.scatter([x for x, _ in points], [c["geomean_us"] for _, c in points], s=28, color=_colour(status),
                       label="correct", zorder=3)
        else:
            ax.scatter([x for x, _ in points], [FAILED_BAND] * len(points), s=30, marker="x",
                       color=_colour(status), label=status.replace("_", " "), transform=ax.get_xaxis_transform(),
                       zorder=3, clip_on=False)
    bx, by_ = _best_steps(snap, by)
    if bx:
        ax.step(bx, by_, where="post", color="#2e7d32", linewidth=1.6, alpha=0.8, label="best so far", zorder=2)

    base = snap.baselines()
    values = [c["geomean_us"] for c in snap.correct]
    for label, us in (("PyTorch eager", base.reference_us), ("torch.compile", base.compile_us),
                      ("physical floor", base.floor_us)):
        if us:
            colour, style = BASELINE_STYLES[label]
            ax.axhline(us, color=colour, linestyle=style, linewidth=1.2, label=f"{label} {fmt_us(us, ' us', 1)}")
            values.append(us)
    handles, labels = ax.get_legend_handles_labels()
    for note in base.missing():  # say which lines are missing rather than leave the reader guessing
        handles.append(Line2D([], [], linestyle="none"))
        labels.append(note)
    if values and max(values) / min(values) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("evaluation" if by == "evaluation" else "iteration")
    ax.set_ylabel("geomean time (us)")
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if xs:
        ax.set_xlim(min(0.5, min(xs) - 0.5), max(xs) + 0.5)
    if not snap.settled:
        ax.text(0.5, 0.5, "no candidate evaluated yet", ha="center", va="center", transform=ax.transAxes,
                color="#757575")
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def draw_shape_speedups(ax, snap: Snapshot) -> None:
    """Per benchmark shape: the best kernel's speedup over the seed, PyTorch eager and torch.compile."""
    best = snap.best
    if best is None:
        ax.text(0.5, 0.5, "no correct kernel", ha="center", va="center", transform=ax.transAxes)
        return
    times = shape_times(best)
    labels = list(times)
    bases = (("vs seed", snap.seed), ("vs PyTorch eager", snap.reference), ("vs torch.compile", snap.compiled))
    series = [(name, shape_times(base)) for name, base in bases if base and base["status"] == "ok"]
    width = 0.8 / max(1, len(series))
    crowded = len(labels) > 8  # fp8's 18 shapes: a wider figure, labels standing up
    if crowded:
        w, h = ax.figure.get_size_inches()
        ax.figure.set_size_inches(max(w, 0.7 * len(labels)), h * 1.2)
    for k, (name, base_times) in enumerate(series):
        ratios = [speedup(base_times.get(s), times[s]) or 0.0 for s in labels]
        positions = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        bars = ax.bar(positions, ratios, width=width, label=name,
                      color=("#2e7d32", "#1565c0", "#6a1b9a")[k])
        ax.bar_label(bars, labels=[fmt_x(r) if r else "n/a" for r in ratios], fontsize=6 if crowded else 7,
                     rotation=90 if crowded else 0, padding=2)
    ax.axhline(1.0, color="#757575", linewidth=1)
    ax.margins(y=0.15)
    ax.set_xticks(range(len(labels)), labels, rotation=35 if crowded else 20, ha="right", fontsize=7 if crowded else 8)
    ax.set_ylabel("speedup of the best kernel")
    ax.set_title(f"best kernel {best['id']}: {fmt_us(best['geomean_us'], ' us')} geomean", fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)


def draw_speed_of_light(ax, snap: Snapshot) -> None:
    """Per benchmark shape: the fraction of the roofline bound the best kernel and the seed reach
    (1.0 is the bound: bytes at peak bandwidth or FLOPs at peak rate, whichever is larger)."""
    best = snap.best
    rows = snap.sol(best)
    if not rows:
        ax.text(0.5, 0.5, "no roofline bound (CPU interpreter, unknown device or no correct kernel)",
                ha="center", va="center", transform=ax.transAxes, color="#757575", fontsize=8)
        return
    labels = [shape_label(r["shape"]) for r in rows]
    seed = {shape_label(r["shape"]): r["fraction"] for r in snap.sol(snap.seed)}
    series = [(f"best {best['id']}", [r["fraction"] for r in rows], "#2e7d32")]
    if seed and snap.seed["id"] != best["id"]:
        series.append(("seed", [seed.get(label, 0.0) for label in labels], "#9e9e9e"))
    width = 0.8 / len(series)
    for k, (name, values, colour) in enumerate(series):
        positions = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        bars = ax.bar(positions, values, width=width, label=name, color=colour)
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], fontsize=7, padding=2)
    ax.axhline(1.0, color="#000000", linewidth=1, linestyle="-.", label="roofline bound")
    ax.set_ylim(0, max(1.1, max(v for _, values, _ in series for v in values) * 1.1))
    bounds = [r["bound"] for r in rows]
    ax.set_xticks(range(len(labels)), [f"{label}\n({b})" for label, b in zip(labels, bounds)],
                  rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("fraction of speed of light")
    ax.set_title(f"best kernel {best['id']}: {fmt_sol(snap.sol_summary(best))}", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    ax.grid(axis="y", alpha=0.3)


def lineage_layout(snap: Snapshot) -> dict[str, tuple[float, float]]:
    """(generation, row) of every candidate: leaves get consecutive rows, a parent sits at the
    middle of its children, so the tree reads left (seed) to right (newest)."""
    tree, pos, next_row = snap.children(), {}, [0.0]

    def place(c: dict, depth: int) -> float:
        kids = tree.get(c["id"], [])
        rows = [place(k, depth + 1) for k in kids]
        row = sum(rows) / len(rows) if rows else next_row[0]
        if not rows:
            next_row[0] += 1
        pos[c["id"]] = (float(depth), row)
        return row

    for root in tree.get(None, []):
        place(root, 0)
    return pos


def draw_lineage(ax, snap: Snapshot) -> None:
    """The lineage tree: an edge per parent -> child, nodes coloured by status, the best ringed."""
    pos = lineage_layout(snap)
    best = snap.best
    for c in snap.candidates:
        if c["id"] in pos and c["parent_id"] in pos:
            (x0, y0), (x1, y1) = pos[c["parent_id"]], pos[c["id"]]
            ax.plot([x0, x1], [y0, y1], color="#bdbdbd", linewidth=1, zorder=1)
    label_all = len(pos) <= 40
    for cid, (x, y) in pos.items():
        c = snap.by_id[cid]
        is_best = best is not None and cid == best["id"]
        ax.scatter([x], [y], s=120 if is_best else 40, color=_colour(c["status"]), zorder=3,
                   edgecolors="#ffb300" if is_best else "white", linewidths=2.5 if is_best else 0.5)
        if label_all or is_best:
            text = cid if not c["geomean_us"] else f"{cid}\n{fmt_us(c['geomean_us'], ' us', 1)}"
            ax.annotate(text, (x, y), xytext=(6, 0), textcoords="offset points", fontsize=6, va="center")
    ax.set_xlabel("generation (edits from the seed)")
    ax.set_yticks([])
    if pos:  # room for the labels right of the newest generation
        depth = max(x for x, _ in pos.values())
        rows = max(y for _, y in pos.values())
        ax.set_xlim(-0.3, depth + 0.3 + 0.1 * max(1.0, depth))
        ax.set_ylim(-0.7, rows + 0.7)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    handles = [Line2D([], [], marker="o", linestyle="none", color=_colour(s), label=s.replace("_", " "))
               for s in sorted({snap.by_id[cid]["status"] for cid in pos})]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def draw_uplift(ax, snap: Snapshot) -> None:
    """Predicted uplift range (horizontal bar) against the measured uplift, with the y = x diagonal."""
    points = snap.predictions()
    measured = [p for p in points if p["measured"] is not None]
    for p in measured:
        mid = (p["low"] + p["high"]) / 2
        ax.errorbar([mid], [p["measured"]], xerr=[[mid - p["low"]], [p["high"] - mid]], fmt="o", capsize=3,
                    color="#2e7d32" if p["inside"] else "#ef6c00")
    lows = [v for p in measured for v in (p["low"], p["high"], p["measured"])]
    if lows:
        lo, hi = min(lows + [0.0]), max(lows + [0.0])
        ax.plot([lo, hi], [lo, hi], color="#757575", linewidth=1, linestyle="--")
    ax.axhline(0, color="#bdbdbd", linewidth=0.8)
    ax.set_xlabel("predicted uplift (%), range and midpoint")
    ax.set_ylabel("measured uplift (%)")
    failed = len(points) - len(measured)
    ax.set_title(f"{len(measured)} experiment(s) measured"
                 + (f", {failed} without a correct kernel (not shown)" if failed else ""), fontsize=9)
    ax.legend(handles=[Line2D([], [], marker="o", linestyle="none", color="#2e7d32", label="inside prediction"),
                       Line2D([], [], marker="o", linestyle="none", color="#ef6c00", label="outside prediction")],
              fontsize=7, frameon=False)
    ax.grid(alpha=0.3)


def timeline_figure(snap: Snapshot, by: str = "evaluation", size=(7.5, 3.4), dpi: int = 100) -> Figure:
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    draw_timeline(fig.add_subplot(), snap, by=by)
    return fig


def png_bytes(fig: Figure, **metadata) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata=metadata or None)
    return buf.getvalue()
