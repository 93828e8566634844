"""Did the model beat plain autotuning? The offline baseline on every built-in problem.

Runs `kscience run PROBLEM --llm offline --iterations N` for each built-in and each budget (through
the CLI, exactly as a user would) into one database; each iteration is three evaluations, so the
default budgets 2 and 10 are 6 evaluations (what a two-iteration model run gets) and 30. Prints and
writes a table per budget of seed vs best found vs PyTorch eager vs torch.compile vs the physical
floor, with the candidates it took to reach the best, the search that ran (optuna-tpe, or
random+local without Optuna) and the wall time per evaluation. Results go to
benchmarks/results/offline-runs-<device>-<date>.{json,md}.

    python benchmarks/offline_runs.py [--budgets 2,10] [--problems softmax,matmul] [--db runs.db]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from kscience.device import detect
from kscience.problems import builtin_names, geomean
from kscience.scientist.offline.search import search_name
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store


def floor_geomean(result: dict) -> float | None:
    """Geometric mean of the physical floors of the benchmark shapes an evaluation timed."""
    floors = [s["floor_us"] for s in (result or {}).get("shapes", []) if s.get("time_us") and s.get("floor_us")]
    return geomean(floors) if floors else None


def row_for(store: Store, run_id: str, problem: str) -> dict:
    snap = Snapshot.load(store, run_id)
    m, best = snap.metrics(), snap.best
    return {"problem": problem, "run_id": run_id, "seed_us": m.seed_us, "best_us": m.best_us,
            "eager_us": m.eager_us, "compiled_us": m.compiled_us,
            "floor_us": floor_geomean(best.stored_result) if best else None, "n_candidates": m.n_candidates,
            "best_reached_after": m.evaluated_to_best, "speedup_vs_seed": m.speedup_vs_seed}


def fmt(x) -> str:
    return "-" if x is None else (f"{x:,.1f}" if isinstance(x, float) else str(x))


def table(rows: list[dict]) -> list[str]:
    header = ["problem", "seed us", "best us", "eager us", "compile us", "floor us", "candidates", "to best", "x seed"]
    keys = ["problem", "seed_us", "best_us", "eager_us", "compiled_us", "floor_us", "n_candidates",
            "best_reached_after", "speedup_vs_seed"]
    if rows and "s_per_eval" in rows[0]:
        header, keys = header + ["iterations", "s/eval"], keys + ["iterations", "s_per_eval"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(fmt(r.get(k)) for k in keys) + " |" for r in rows]


def write(stem: Path, title: str, device: str, stamp: str, iterations, rows: list[dict]) -> None:
    stem.with_suffix(".json").write_text(json.dumps({"device": device, "date": stamp, "iterations": iterations,
                                                     "search": search_name(), "rows": rows}, indent=2))
    stem.with_suffix(".md").write_text(f"# {title}\n\n" + "\n".join(table(rows)) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(builtin_names()))
    ap.add_argument("--budgets", default="2,10", help="iterations per run, comma-separated (3 evaluations each)")
    ap.add_argument("--db", default="offline-runs.db")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    device = detect()
    stamp = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"offline-runs-{device.name.replace(' ', '_').replace('(', '').replace(')', '')}-{stamp}"
    title = f"Offline baseline (knob search: {search_name()}), 3 evaluations per iteration, {device.name}, {stamp}"
    # Earlier sweeps of the same day and device (another problem list or budget) stay in the files.
    old = json.loads(stem.with_suffix(".json").read_text()).get("rows", []) if stem.with_suffix(".json").exists() else []
    rows = []
    for iterations in budgets:
        for problem in args.problems.split(","):
            name = f"offline-{problem}-{iterations}it"
            cmd = [sys.executable, "-m", "kscience.cli.main", "run", problem, "--llm", "offline", "--iterations",
                   str(iterations), "--db", args.db, "--name", name]
            started = time.perf_counter()
            code = subprocess.run(cmd).returncode
            wall = time.perf_counter() - started
            with Store(args.db) as store:
                run = next(r for r in store.list_runs() if r.name == name)
                row = row_for(store, run.id, problem)
            rows.append(dict(row, iterations=iterations, exit_code=code, wall_s=round(wall, 1),
                             s_per_eval=round(wall / max(1, row["n_candidates"] or 1), 1)))
            kept = [r for r in old if (r["problem"], r.get("iterations")) not in {(x["problem"], x["iterations"]) for x in rows}]
            write(stem, title, device.name, stamp, sorted({r.get("iterations") for r in kept + rows} - {None}),
                  kept + rows)  # after each run: a cut-off sweep keeps it
    print(f"\n{title}\n" + "\n".join(table(rows)))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
