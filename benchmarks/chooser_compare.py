"""Which plan chooser earns the default? `--chooser paper` against `--chooser loop` at equal evaluations.

The paper's rule (GPU Kernel Scientist: the most innovative plan, the highest predicted maximum, the highest
predicted minimum) reads scores the designer gives itself, which invites ranges pushed toward the rule rather
than honest estimates; the loop's rule (the highest predicted upside, the plan furthest from those tried, the
next highest upside weighed by distance) reads the predictions alone. Both run here on the same problems
with the same designer (the offline scientist, whose predictions are its catalogue's, so the choosers differ
only in which plans they carry out), the same seeds and the same --evaluations budget. Each chooser's carried
out plans are then scored against what was measured:

  experiments     findings recorded (plans carried out to a verdict)
  correct         share of them that came back correct
  in range        share of the correct ones whose measured uplift fell inside the predicted range
  |error|         mean |middle of the predicted range - measured uplift|, in percentage points
  bias            mean (middle of the predicted range - measured), positive: the picks were optimistic
  best x          the run's best kernel against its seed (geomean over the runs of a problem)

Under the CPU interpreter the measured uplifts are interpreter timings: they show which plans keep a
kernel correct and which change the interpreted work, not GPU speed, so "in range" and "|error|" here
score the choosers' picks against interpreter measurements. A GPU run of the same command is what would
decide the default for GPU work.

    PYTHONPATH=$PWD python3 benchmarks/chooser_compare.py                      # softmax and rmsnorm, 10 evaluations, 2 seeds
    PYTHONPATH=$PWD python3 benchmarks/chooser_compare.py --problems matmul,swiglu --evaluations 16 --seeds 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's kscience

from kscience.device import detect  # noqa: E402
from kscience.record.snapshot import best_candidate, first_of_kind, judged_count  # noqa: E402
from kscience.record.store import Store  # noqa: E402
from kscience.run.config import RunConfig  # noqa: E402
from kscience.run.driver import Run  # noqa: E402
from kscience.scientist.plans import CHOOSERS  # noqa: E402


def one_run(problem: str, chooser: str, seed: int, evaluations: int, folder: Path) -> dict:
    """One offline run; what its findings predicted and measured, and its best against its seed."""
    store = Store(folder / f"{problem}-{chooser}-{seed}.db")
    config = RunConfig(problem=problem, llm="offline", chooser=chooser, seed=seed, evaluations=evaluations,
                       lines=1, compiled_baseline=False, profile="none")
    run = Run.create(config, store=store)
    started = time.monotonic()
    status = run.start(background=False).status
    cands = store.candidates(run.id)
    seed_c, best = first_of_kind(cands, "seed"), best_candidate(cands)
    findings = [{"predicted": [f.predicted_min_pct, f.predicted_max_pct], "measured": f.measured_pct}
                for f in store.findings(run.id)]
    return {"problem": problem, "chooser": chooser, "seed": seed, "status": status, "run_id": run.id,
            "evaluations": judged_count(cands), "wall_s": round(time.monotonic() - started, 1),
            "best_x": (seed_c.geomean_us / best.geomean_us) if seed_c and best and seed_c.geomean_us else None,
            "findings": findings}


def score(runs: list[dict]) -> dict:
    """The chooser's picks against what was measured, over `runs` (one problem, one chooser)."""
    found = [f for r in runs for f in r["findings"]]
    timed = [f for f in found if f["measured"] is not None]
    mids = [((f["predicted"][0] + f["predicted"][1]) / 2, f["measured"]) for f in timed]
    inside = [f["predicted"][0] <= f["measured"] <= f["predicted"][1] for f in timed]
    best = [r["best_x"] for r in runs if r["best_x"]]
    return {"runs": len(runs), "evaluations": sum(r["evaluations"] for r in runs), "experiments": len(found),
            "correct": round(len(timed) / len(found), 3) if found else None,
            "in_range": round(sum(inside) / len(inside), 3) if inside else None,
            "abs_error_pp": round(statistics.mean(abs(m - x) for m, x in mids), 2) if mids else None,
            "bias_pp": round(statistics.mean(m - x for m, x in mids), 2) if mids else None,
            "best_x": round(math.exp(statistics.mean(math.log(b) for b in best)), 4) if best else None}


def _cell(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(scores: dict[tuple[str, str], dict]) -> str:
    rows = ["| problem | chooser | runs | evaluations | experiments | correct | in range | abs error (pp) | bias (pp) "
            "| best x |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (problem, chooser), s in sorted(scores.items()):
        rows.append(f"| {problem} | {chooser} | {s['runs']} | {s['evaluations']} | {s['experiments']} | "
                    f"{_cell(s['correct'], '.0%')} | {_cell(s['in_range'], '.0%')} | {_cell(s['abs_error_pp'], '.1f')} "
                    f"| {_cell(s['bias_pp'], '+.1f')} | {_cell(s['best_x'], '.3f')} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="softmax,rmsnorm", help="built-in problems, comma-separated")
    parser.add_argument("--evaluations", type=int, default=10, help="--evaluations of every run")
    parser.add_argument("--seeds", type=int, default=2, help="runs per problem and chooser (seeds 0..N-1)")
    parser.add_argument("--out", default=None, help="results file (default: benchmarks/results/chooser-compare-...)")
    args = parser.parse_args()
    device = detect()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        for problem in args.problems.split(","):
            for seed in range(args.seeds):
                for chooser in CHOOSERS:
                    runs.append(one_run(problem, chooser, seed, args.evaluations, Path(folder)))
                    r = runs[-1]
                    print(f"{problem} {chooser} seed {seed}: {r['status']}, {r['evaluations']} evaluations, "
                          f"{len(r['findings'])} findings, best {_cell(r['best_x'], '.3f')}x, {r['wall_s']} s",
                          flush=True)
    scores = {(p, c): score([r for r in runs if r["problem"] == p and r["chooser"] == c])
              for p in args.problems.split(",") for c in CHOOSERS}
    text = table(scores)
    print(text)
    date = datetime.date.today().isoformat()
    name = device.name.replace(" ", "_").replace("(", "").replace(")", "")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"chooser-compare-{name}-{date}-at-{commit}"
    meta = {"device": device.name, "interpreted": device.interpreted, "commit": commit, "date": date,
            "evaluations_per_run": args.evaluations, "seeds": args.seeds, "designer": "offline scientist"}
    out.with_suffix(".json").write_text(json.dumps({**meta, "scores": {f"{p}/{c}": s for (p, c), s in scores.items()},
                                                    "runs": runs}, indent=1))
    out.with_suffix(".md").write_text(f"# Plan choosers at equal evaluations ({device.name}, {commit}, {date})\n\n"
                                      f"{args.evaluations} evaluations per run, {args.seeds} seed(s), the offline "
                                      f"scientist designing; columns as benchmarks/chooser_compare.py defines them.\n\n"
                                      f"{text}\n")
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
