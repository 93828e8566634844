"""What does the offline scientist find on every built-in problem?

Runs `kscience run PROBLEM --llm offline` for each built-in (through the CLI, exactly as a user
would) into one database, then prints and writes a table of seed vs best found vs PyTorch eager
vs torch.compile vs the physical floor, with the number of candidates it took to reach the best.
Results go to benchmarks/results/offline-runs-<device>-<date>.{json,md}.

    python benchmarks/offline_runs.py [--iterations 3] [--problems softmax,matmul] [--db runs.db]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from kscience.device import detect
from kscience.problems import builtin_names, geomean
from kscience.snapshot import Snapshot
from kscience.store import Store


def floor_geomean(result: dict) -> float | None:
    """Geometric mean of the physical floors of the benchmark shapes an evaluation timed."""
    floors = [s["floor_us"] for s in (result or {}).get("shapes", []) if s.get("time_us") and s.get("floor_us")]
    return geomean(floors) if floors else None


def row_for(store: Store, run_id: str, problem: str) -> dict:
    snap = Snapshot.load(store, run_id)
    m, best = snap.metrics(), snap.best
    return {"problem": problem, "run_id": run_id, "seed_us": m["seed_us"], "best_us": m["best_us"],
            "eager_us": m["reference_us"], "compiled_us": m["compiled_us"],
            "floor_us": floor_geomean(best["result"]) if best else None, "n_candidates": m["n_candidates"],
            "best_reached_after": m["evaluated_to_best"], "speedup_vs_seed": m["speedup_vs_seed"]}


def fmt(x) -> str:
    return "-" if x is None else (f"{x:,.1f}" if isinstance(x, float) else str(x))


def table(rows: list[dict]) -> list[str]:
    header = ["problem", "seed us", "best us", "eager us", "compile us", "floor us", "candidates", "to best", "x seed"]
    keys = ["problem", "seed_us", "best_us", "eager_us", "compiled_us", "floor_us", "n_candidates",
            "best_reached_after", "speedup_vs_seed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(fmt(r[k]) for k in keys) + " |" for r in rows]


def write(stem: Path, title: str, device: str, stamp: str, iterations: int, rows: list[dict]) -> None:
    stem.with_suffix(".json").write_text(json.dumps({"device": device, "date": stamp, "iterations": iterations,
                                                     "rows": rows}, indent=2))
    stem.with_suffix(".md").write_text(f"# {title}\n\n" + "\n".join(table(rows)) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(builtin_names()))
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--db", default="offline-runs.db")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    device = detect()
    stamp = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"offline-runs-{device.name.replace(' ', '_').replace('(', '').replace(')', '')}-{stamp}"
    title = f"Offline scientist, {args.iterations} iterations, {device.name}, {stamp}"
    rows = []
    for problem in args.problems.split(","):
        cmd = [sys.executable, "-m", "kscience.cli", "run", problem, "--llm", "offline", "--iterations",
               str(args.iterations), "--db", args.db, "--name", f"offline-{problem}"]
        code = subprocess.run(cmd).returncode
        with Store(args.db) as store:
            run = next(r for r in store.list_runs() if r["name"] == f"offline-{problem}")
            rows.append(dict(row_for(store, run["id"], problem), exit_code=code))
        write(stem, title, device.name, stamp, args.iterations, rows)  # after each problem: a cut-off run keeps it
    print(f"\n{title}\n" + "\n".join(table(rows)))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
