"""Does a run use the machine? One problem searched by one line, then by K lines, with a slow model.

The model is the offline scientist answering as slowly as a real model (`--llm offline@SECONDS`:
every answer takes --latency seconds, 30 by default), so the runs differ only in how many lines of
work they keep going. Each run gets the same wall-clock window (--window: new work stops being
started then, work in flight finishes), a fresh local executor and a fresh compile cache. Printed
and written to benchmarks/results/search-throughput-<device>-<date>.json, per run:

  evaluations per hour   candidate kernels judged (seed, children, repairs) per hour of the run
  busy per slot          fraction of the run's wall time each evaluation slot had one in flight
                         (the run's own record, as `kscience show` prints it), start-up included
  best at n              the best correct kernel among each run's first n evaluations, n the fewest
                         any run made: what the same number of evaluations bought

Targets (issue 24): with K = 2 x slots lines and a 30 s model, busy >= 0.9 per GPU and evaluations per
hour >= 2.5x the serial run's. Both need the evaluator to be the bottleneck: K lines supply about
3K evaluations per ~4 model latencies, so K must be near 4 x latency / (3 x seconds per evaluation).

    python benchmarks/search_throughput.py                        # one GPU: ~5 min
    python benchmarks/search_throughput.py --gpus 2               # two GPUs, K = 4
    python benchmarks/search_throughput.py --lines 2,6            # several K against the one serial run
    KSCIENCE_DEVICE=cpu python benchmarks/search_throughput.py --quick   # CPU interpreter, 2 slots
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's kscience

from kscience.run.config import RunConfig  # noqa: E402
from kscience.device import detect  # noqa: E402
from kscience.evaluate.executor import LocalExecutor  # noqa: E402
from kscience.run.driver import Run  # noqa: E402
from kscience.record.snapshot import Snapshot, judged_count  # noqa: E402
from kscience.record.store import BASELINE_KINDS, PENDING, WRITE_FAILED, Store  # noqa: E402


MIN_LATENCIES = 5  # a window shorter than this many model answers measures only the start of a run


def one_run(db: Path, *, problem: str, lines: int, latency: float, window: float, gpus: int | None,
            cpu_workers: int | None, evaluations: int) -> dict:
    os.environ["KSCIENCE_CACHE"] = tempfile.mkdtemp(prefix="kscience-cache-")  # no kernel compiled by another run
    store = Store(db)
    config = RunConfig(problem=problem, llm=f"offline@{latency:g}", lines=lines, evaluations=evaluations,
                       time_limit_s=window, compiled_baseline=False, name=f"{lines} line(s)")
    executor = LocalExecutor(gpus=gpus, cpu_workers=cpu_workers)
    try:
        run = Run.create(config, store=store, executor=executor)
        started = time.monotonic()
        status = run.start(background=False).status
        wall = time.monotonic() - started
    finally:
        executor.shutdown()
    snap = Snapshot.load(store, run.id)
    judged = [c for c in snap.candidates
              if c["kind"] not in BASELINE_KINDS and c["status"] not in (PENDING, WRITE_FAILED)]
    judged.sort(key=lambda c: c["evaluated"])
    first_child = next((c["evaluated"] for c in judged if c["kind"] != "seed"), None)
    return {"run_id": run.id, "lines": lines, "slots": executor.capacity, "status": status, "error": run.error,
            "wall_s": round(wall, 1), "evaluations": judged_count(snap.candidates),
            "evaluations_per_hour": round(3600 * judged_count(snap.candidates) / wall, 1),
            "busy_per_slot": snap.busy_fractions, "iterations": snap.iterations_done,
            "first_child_after_s": round(first_child - snap.run["created"], 1) if first_child else None,
            "best_us": snap.best["geomean_us"] if snap.best else None, "seed_us": snap.metrics()["seed_us"],
            "llm_calls": snap.usage["offline_calls"],
            "_times": [c["geomean_us"] if c["status"] == "ok" else None for c in judged]}


def best_within(times: list[float | None], n: int) -> float | None:
    ok = [t for t in times[:n] if t]
    return min(ok) if ok else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="softmax")
    ap.add_argument("--latency", type=float, default=None, help="seconds per model answer (default 30)")
    ap.add_argument("--window", type=float, default=None,
                    help="seconds each run starts new work for; work in flight then finishes (default: ten "
                         "model latencies)")
    ap.add_argument("--lines", default=None, metavar="K,K,...", help="concurrent runs' lines (default 2 x slots)")
    ap.add_argument("--gpus", type=int, default=None, help="evaluation slots on at most N GPUs (default: all)")
    ap.add_argument("--cpu-workers", type=int, default=None, help="interpreter slots without a GPU (default 1)")
    ap.add_argument("--evaluations", type=int, default=500, help="cap per run (the window normally ends it)")
    ap.add_argument("--quick", action="store_true", help="CPU check: 2 interpreter slots, 3 s model, 90 s window")
    ap.add_argument("--db", help="keep the runs in this database (default: a temporary one)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/search-throughput-<device>-<date>.json)")
    args = ap.parse_args()
    quick = {"latency": 3.0, "window": 90.0, "cpu_workers": 2} if args.quick else {}
    for name, default in {"latency": 30.0, "cpu_workers": None, **quick}.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.window is None:
        args.window = 10 * args.latency
    if args.window < MIN_LATENCIES * args.latency:
        # Measured on an H100: a 70 s window with a 30 s model ended every run after 2-3 evaluations.
        print(f"search_throughput: a {args.window:g} s window is under {MIN_LATENCIES} model latencies; a line "
              "needs three answers before its first child exists, so this measures start-up, not throughput",
              file=sys.stderr)
    device = detect()
    slots = LocalExecutor(gpus=args.gpus, cpu_workers=args.cpu_workers)
    n_slots = slots.capacity
    slots.shutdown()
    concurrent = [int(k) for k in args.lines.split(",")] if args.lines else [2 * n_slots]
    with tempfile.TemporaryDirectory(prefix="kscience-throughput-") as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "runs.db"
        runs = []
        for lines in [1, *concurrent]:
            print(f"running {args.problem} with {lines} line(s), {n_slots} slot(s), a {args.latency:g} s model, "
                  f"{args.window:g} s window ...", file=sys.stderr, flush=True)
            runs.append(one_run(db, problem=args.problem, lines=lines, latency=args.latency, window=args.window,
                                gpus=args.gpus, cpu_workers=args.cpu_workers, evaluations=args.evaluations))
    common = min(len(r["_times"]) for r in runs)
    serial = runs[0]
    for r in runs:
        r["best_at_common_n_us"] = best_within(r.pop("_times"), common)
        r["vs_serial_evaluations_per_hour"] = round(r["evaluations_per_hour"] / serial["evaluations_per_hour"], 2)
    date = datetime.date.today().isoformat()
    report = {"benchmark": "search_throughput", "device": device.name, "date": date, "problem": args.problem,
              "settings": {"latency_s": args.latency, "window_s": args.window, "slots": n_slots,
                           "gpus": args.gpus, "cpu_workers": args.cpu_workers, "evaluation_cap": args.evaluations,
                           "model": f"offline@{args.latency:g}", "compiled_baseline": False,
                           "quick": args.quick},
              "common_n": common, "runs": runs,
              "targets": {"busy_per_slot": 0.9, "evaluations_per_hour_vs_serial": 2.5, "lines": 2 * n_slots}}
    print(f"\n{device.name}  {args.problem}  {n_slots} slot(s), model {args.latency:g} s/answer, "
          f"window {args.window:g} s  {date}")
    print(f"{'lines':>5}{'wall s':>8}{'evals':>7}{'evals/h':>9}{'x serial':>9}{'iters':>6}{'1st child s':>12}"
          f"{'best us':>10}{f'best@{common}':>10}  busy per slot")
    for r in runs:
        best = "-" if r["best_us"] is None else f"{r['best_us']:.2f}"
        at_n = "-" if r["best_at_common_n_us"] is None else f"{r['best_at_common_n_us']:.2f}"
        first = "-" if r["first_child_after_s"] is None else f"{r['first_child_after_s']:.0f}"
        print(f"{r['lines']:>5}{r['wall_s']:>8.0f}{r['evaluations']:>7}{r['evaluations_per_hour']:>9.0f}"
              f"{r['vs_serial_evaluations_per_hour']:>9.2f}{r['iterations']:>6}{first:>12}{best:>10}{at_n:>10}  "
              + ", ".join(f"{b:.2f}" for b in r["busy_per_slot"]) + f"  ({r['status']})")
    suffix = "-quick" if args.quick else ""
    out = Path(args.out) if args.out else (ROOT / "benchmarks" / "results" /
                                           f"search-throughput-{re.sub(r'[^A-Za-z0-9]+', '_', device.name).strip('_')}-{date}{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
