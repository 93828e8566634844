"""Report figures of a stored run, as PNG files: the script behind notebooks/report.ipynb.

    python -m kscience.jupyter.report --db runs.db --figures-dir DIR [--run RUN_ID] [--overwrite]

Four figures per run, named after its problem: timing (best time per iteration, every candidate,
and the baselines), shapes (the best kernel's speedup per benchmark shape), lineage (the tree of
candidates) and uplift (each experiment's predicted against measured uplift). It reads only the
database, so figures of a GPU run can be made on any machine. Each PNG records the run, device
and command that made it in its metadata. A figure that would replace a file git tracks (the
committed H100 figures in `figures/`, say) is refused unless `overwrite` is given.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from matplotlib.figure import Figure

from kscience.jupyter import plots
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store, StoreError

FIGURES = {  # file suffix -> (what it shows, drawing, figure size in inches)
    "timing": ("best time per iteration with the baselines", lambda ax, s: plots.draw_timeline(ax, s, by="iteration"),
               (8.0, 4.0)),
    "shapes": ("per-shape speedup of the best kernel", plots.draw_shape_speedups, (7.0, 4.0)),
    "lineage": ("lineage tree of the candidates", plots.draw_lineage, (8.0, 5.0)),
    "uplift": ("predicted vs measured uplift of the experiments", plots.draw_uplift, (6.0, 5.0)),
    "sol": ("fraction of speed of light per shape", plots.draw_speed_of_light, (7.0, 4.0)),
}


class ReportError(Exception):
    """No database, no such run, or nothing evaluated to draw. One line."""


def tracked_by_git(paths: list[Path]) -> list[Path]:
    """Those of `paths` (files of one folder) that the git checkout holding them tracks; none
    outside a checkout or without git."""
    if not paths:
        return []
    folder = paths[0].parent
    try:
        listed = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--", *(p.name for p in paths)],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = set(listed.stdout.split("\0")) if listed.returncode == 0 else set()
    return [p for p in paths if p.name in names]


def pick_run(store: Store, run_id: str | None) -> str:
    """`run_id`, else the newest run with at least one evaluated candidate."""
    if run_id:
        store.run(run_id)
        return run_id
    for row in store.list_runs():
        if Snapshot.load(store, row.id).evaluated:
            return row.id
    raise ReportError(f"no run in {store.path} has an evaluated candidate")


def _database(db: str | Path) -> Path:
    path = Path(db).expanduser()
    if not path.is_file():
        raise ReportError(f"no database at {path}")
    return path


def chosen_run(db: str | Path, run_id: str | None = None) -> str:
    """The run a report of `db` is about: `run_id`, else the newest with an evaluated candidate."""
    with Store(_database(db), readonly=True) as store:
        return pick_run(store, run_id)


def figure_stem(snap: Snapshot) -> str:
    return Path(snap.run.problem).stem or snap.run.id


def report_figure(snap: Snapshot, suffix: str) -> Figure:
    """One report figure of a run (a key of FIGURES), titled with the problem, run, device and model."""
    what, draw, size = FIGURES[suffix]
    fig = Figure(figsize=size, dpi=120, layout="constrained")
    draw(fig.add_subplot(), snap)
    device = snap.device.name or "unknown device"
    # The problem's name, not its path: a KernelBench file's full path ran past the figure's edge.
    fig.suptitle(f"{Path(snap.run.problem).name}: {what}\nrun {snap.run.id}, {device}, {snap.run.llm}",
                 fontsize=9)
    return fig


def write_figures(db: str | Path, figures_dir: str | Path, run_id: str | None = None,
                  command: str | None = None, overwrite: bool = False) -> list[Path]:
    """Draw the report figures of one run into `figures_dir`; returns the paths written. Nothing is
    written where one of them would replace a file git tracks, unless `overwrite`."""
    db = _database(db)
    out = Path(figures_dir).expanduser()
    with Store(db, readonly=True) as store:  # drawing reads the runs, never changes them
        snap = Snapshot.load(store, pick_run(store, run_id))
    suffixes = [s for s in FIGURES if s != "sol" or snap.sol_summary(snap.best) is not None]  # no bound (CPU): no sol
    paths = [out / f"{figure_stem(snap)}-{suffix}.png" for suffix in suffixes]
    tracked = [] if overwrite else tracked_by_git([p for p in paths if p.exists()])
    if tracked:
        named = ", ".join(map(str, tracked))
        raise ReportError(f"{len(tracked)} of the figures would replace files git tracks ({named}): write them "
                          f"elsewhere, or replace them on purpose with overwrite=True (--overwrite)")
    out.mkdir(parents=True, exist_ok=True)
    device = snap.device.name or "unknown device"
    command = command or f"python -m kscience.jupyter.report --db {shlex.quote(str(db))} " \
                         f"--figures-dir {shlex.quote(str(figures_dir))} --run {snap.run.id}" + \
                         (" --overwrite" if overwrite else "")
    for suffix, path in zip(suffixes, paths):
        what = FIGURES[suffix][0]
        fig = report_figure(snap, suffix)
        path.write_bytes(plots.png_bytes(fig, Title=f"{snap.run.problem} {suffix}", Source=command,
                                         Description=f"{what}; run {snap.run.id} on {device}"))
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kscience.jupyter.report", description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True, metavar="PATH", help="the run database (SQLite)")
    p.add_argument("--figures-dir", required=True, metavar="DIR", help="where the PNG files go")
    p.add_argument("--run", metavar="RUN_ID", help="which run (default: the newest with an evaluated candidate)")
    p.add_argument("--overwrite", action="store_true", help="replace figures that git tracks (the committed ones)")
    args = p.parse_args(argv)
    command = "python -m kscience.jupyter.report " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    try:
        paths = write_figures(args.db, args.figures_dir, args.run, command, overwrite=args.overwrite)
    except (ReportError, StoreError) as exc:
        print(f"kscience: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
