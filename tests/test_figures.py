"""The report figures as a reader sees them: every piece of text inside the canvas, and every series the
legend names drawn where the axes show it (a baseline the axis reaches is a line, not "off scale").
Also the quickstart's shape lists: the shapes this machine judges, not the GPU's."""

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.text import Text

from kscience.jupyter.report import FIGURES, report_figure
from kscience.problems import load_problem
from kscience.problems.roofline import peaks_for, shape_sol
from kscience.record.rows import ProfileRow
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.record.candidate import Candidate
from test_loop import ScriptedScientist, make_run

ROOT = Path(__file__).resolve().parents[1]


def snapshot(tmp_path, factors, problem_path: str | None = None, reference_scale: float = 1.0) -> Snapshot:
    run = make_run(tmp_path, ScriptedScientist(factors=factors), iterations=2)
    assert run.start(background=False).status == "finished"
    with Store(run.store.path) as store:
        snap = Snapshot.load(store, run.id)
    if problem_path:  # as a run of a KernelBench file stores it: the file's full path
        snap.run = dataclasses.replace(snap.run, problem=problem_path)
    snap.candidates = [Candidate.from_row(dict(c.to_row(), geomean_us=c.geomean_us * reference_scale))
                       if c.kind == "eager" else c
                       for c in snap.candidates]
    return snap


def drawn(fig):
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def texts_outside(fig) -> list[str]:
    renderer = drawn(fig)
    width, height = fig.canvas.get_width_height()
    outside = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or text in _undrawn_tick_labels(fig):
            continue
        box = text.get_window_extent(renderer)
        if box.x0 < -1 or box.y0 < -1 or box.x1 > width + 1 or box.y1 > height + 1:
            outside.append(text.get_text())
    return outside


def _undrawn_tick_labels(fig) -> set:
    """Labels of ticks outside an axis's view: matplotlib keeps them, but does not draw them."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if tick.get_loc() is None or not low - 1e-9 * abs(high - low) <= tick.get_loc() <= high + 1e-9 * abs(high - low):
                    hidden |= {tick.label1, tick.label2}
    return hidden


def undrawn_series(ax) -> list[str]:
    """Legend labels with nothing drawn for them inside the axes' view (notes without a line excepted)."""
    legend = ax.get_legend()
    if legend is None:
        return []
    artists = [*ax.lines, *ax.collections, *ax.containers]
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    missing = []
    for handle, text in zip(legend.legend_handles, legend.get_texts()):
        label = text.get_text()
        if isinstance(handle, Line2D) and handle.get_linestyle() == "None" and handle.get_marker() in ("None", None, ""):
            continue  # a note such as "torch.compile: not timed (CPU run)"
        if label.endswith("(off scale)"):  # named at the axes' edge with an arrow instead
            if not any(t.get_text().startswith(label[:-len(" (off scale)")]) for t in ax.texts):
                missing.append(label)
            continue
        mine = [a for a in artists if a.get_label() == label]
        if not any(_shows(a, x0, x1, y0, y1) for a in mine) and not _keyed(handle, ax):
            missing.append(label)
    return missing


def _keyed(handle, ax) -> bool:
    """A legend key (a marker standing for a colour, as the lineage's statuses and best ring): some point
    of the axes has its colour."""
    if not isinstance(handle, Line2D) or handle.get_marker() in ("None", None, ""):
        return False
    wanted = {to_rgba(handle.get_markerfacecolor()), to_rgba(handle.get_markeredgecolor())} - {to_rgba("white")}
    for collection in ax.collections:
        if len(collection.get_offsets()):
            colours = {tuple(c) for c in collection.get_facecolors()} | {tuple(c) for c in collection.get_edgecolors()}
            if wanted & colours:
                return True
    return any(to_rgba(line.get_color()) in wanted and line.get_marker() not in ("None", None, "")
               and len(line.get_xdata()) for line in ax.lines)


def _shows(artist, x0, x1, y0, y1) -> bool:
    if isinstance(artist, Line2D):
        xs, ys = artist.get_xdata(), artist.get_ydata()
        if artist.get_transform() != artist.axes.transData:  # axhline: x in axes fraction
            return any(y0 <= y <= y1 for y in ys)
        return any(x0 <= x <= x1 and y0 <= y <= y1 for x, y in zip(xs, ys))
    if isinstance(artist, Collection):
        return len(artist.get_offsets()) > 0
    if isinstance(artist, BarContainer):
        return len(artist.patches) > 0
    return True


CASES = {
    "a child beats the seed": dict(factors=(0.9, 0.8, 1.1, 0.5, 0.5)),
    "the seed stays best (a long title)": dict(factors=(1.5, 1.6, 1.7, 1.8, 1.9)),
    "eager far faster, as on the CPU": dict(factors=(0.9, 0.8, 1.1, 0.5, 0.5), reference_scale=0.01),
    "eager far slower": dict(factors=(0.9, 0.8, 1.1, 0.5, 0.5), reference_scale=1e4),
    "a KernelBench file by its path": dict(factors=(0.9, 0.8, 1.1, 0.5, 0.5),
                                           problem_path="/home/someone/KernelBench/KernelBench/level1/"
                                                        "23_Softmax_with_a_rather_long_name.py"),
}


def with_roofline(snap: Snapshot) -> Snapshot:
    """`snap` as if judged on an H100: every correct kernel's speed of light per timed shape in its
    profile, as a GPU run stores it (the interpreter's own runs have no bound to plot). The fake
    kernels' shapes declare no work, so each is given 64 MB moved."""
    peaks = peaks_for("NVIDIA H100 80GB HBM3")
    snap.profiles = [ProfileRow(candidate_id=c.id, run_id=c.run_id, compile_facts=None, ncu=None, flag=None,
                                profile_s=None, updated=0.0,
                                sol=[shape_sol(s.shape, s.time_us, 0.0, 64e6, peaks, "bf16").to_dict()
                                     for s in c.result.shapes if s.phase == "benchmark" and s.time_us])
                     for c in snap.evaluated]
    snap.__dict__.pop("profile_of", None)  # a cached reading of the profiles
    assert snap.sol(snap.best), "the best kernel must have a bound to plot"
    return snap


@pytest.mark.parametrize("case", CASES)
def test_every_report_figure_keeps_its_text_inside_and_draws_what_its_legend_names(case, tmp_path):
    snap = with_roofline(snapshot(tmp_path, **CASES[case]))
    for suffix in FIGURES:
        fig = report_figure(snap, suffix)
        assert texts_outside(fig) == [], suffix
        for ax in fig.axes:
            assert undrawn_series(ax) == [], suffix


def test_a_baseline_the_axis_reaches_is_drawn_as_a_line(tmp_path):
    snap = snapshot(tmp_path, factors=(0.9, 0.8, 1.1, 0.5, 0.5), reference_scale=0.01)
    ax = report_figure(snap, "timing").axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    eager = next(label for label in labels if label.startswith("PyTorch eager"))
    assert "off scale" not in eager and ax.get_ylim()[0] == 0  # a linear axis from zero reaches it


def test_the_quickstart_prints_the_shapes_this_machine_judges():
    cells = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())["cells"]
    (cell,) = [c for c in cells if c["cell_type"] == "code" and "print(\"benchmarks:\"" in "".join(c["source"])]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec("".join(cell["source"]), {})
    softmax = load_problem("softmax")  # the tests run without a GPU: the interpreter's shapes
    assert f"benchmarks: {softmax.cpu_benchmarks}" in out.getvalue() and f"tests: {softmax.cpu_tests}" in out.getvalue()
    assert "judged here on the CPU (Triton interpreter)" in out.getvalue()
