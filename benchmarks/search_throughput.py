"""Does a run use the machine? One problem searched by one line, then by K lines, with a slow model.

The model is the offline scientist answering as slowly as a real model (`--llm offline@SECONDS`:
every answer takes --latency seconds, 30 by default). Its designs differ per line and per call: its
knob search is seeded by each prompt (which names the line's avenue and what the other lines are
designing), keeps to its avenue's share of titles, and samples the knob space rather than listing it,
so on matmul (six knobs, 18,750 raw combinations, the default problem) its catalogue does not run out
within the window. Softmax, which issue 39 first measured, is not the default: its seed declares one
knob of five values, which the stand-in's first answer exhausts, so the lines would measure the
stand-in running out rather than the search (`--problem softmax` still runs it). The runs differ
only in how many lines they keep going. Each run gets the same wall-clock window (--window) from its
start; at its end the run is cancelled as Ctrl-C would (started evaluations finish and are kept).
Each run gets a fresh local executor and compile cache. Per run, printed and written to
benchmarks/results/search-throughput-<device>-<date>.json:

  start-up s          run start to the first child's submission (preflight, the seed, the first design
                      and write; the baselines are judged beside the lines), with its target: the seed's
                      evaluation plus two model answers (JSON: seed_s, startup_target_s)
  evals/h             candidate kernels judged (seed, children, repairs, composites) by the window's end,
                      per hour of window
  busy per slot       the fraction of [first child's submission, window end] each slot had an evaluation
                      in flight (slots assigned to the run's evaluation intervals as they were taken)
  accepted/min        plans carried out (chosen and stored) per minute of window
  refused             plans proposed that were already carried out, under way or pooled elsewhere, plus
                      children whose source had been judged already, as a share of all proposed
  queue               evaluations waiting for a slot, sampled every --sample seconds (JSON, and a line per
                      run under the table; the table gives its mean after the first child)

Targets (issue 39) on one H100 with a 30 s model and a 240 s window: K = 8 lines reach >= 2.5x the
evaluations per hour of one line, every slot busy >= 0.9 after the first child, <= 5% refused, a
start-up within its target.

Each run takes its window plus the evaluations in flight at its end (one, ~10 s on an H100) and the
executor's shut-down: both runs of the default command take ~8.5 min on one GPU.

    python benchmarks/search_throughput.py                          # one GPU: 1 and 8 lines, ~8.5 min
    python benchmarks/search_throughput.py --lines 1 --out one.json # or in two calls of ~4.5 min each:
    python benchmarks/search_throughput.py --lines 8 --one-line-from one.json
    python benchmarks/search_throughput.py --gpus 2 --lines 1,16    # two GPUs
    KSCIENCE_DEVICE=cpu python benchmarks/search_throughput.py --quick  # CPU interpreter check, ~3 min
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from kscience.device import detect  # noqa: E402
from kscience.evaluate.executors.base import LocalExecutor  # noqa: E402
from kscience.record.store import BASELINE_KINDS, Store  # noqa: E402
from kscience.run.config import RunConfig  # noqa: E402
from kscience.run.driver import Run  # noqa: E402

TARGETS = {"evaluations_per_hour_vs_one_line": 2.5, "busy_per_slot": 0.9, "refused_share": 0.05}
QUICK = {"latency": 3.0, "window": 60.0, "cpu_workers": 2, "lines": "1,4"}


def run_for(run: Run, window: float) -> str:
    """Run until it ends or `window` seconds have passed, then cancel it as Ctrl-C does."""
    async def bounded() -> None:
        task = asyncio.create_task(run.run_async())
        done, _ = await asyncio.wait({task}, timeout=window)
        if not done:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(bounded())
    return run.store.run(run.id).status


def slot_busy(intervals: list[tuple[float, float]], slots: int, start: float, end: float) -> list[float]:
    """Each slot's busy share of [start, end]: intervals go, in order of start, to the first free slot."""
    free_at, busy = [float("-inf")] * slots, [0.0] * slots
    for a, b in sorted(intervals):
        slot = next((s for s in range(slots) if free_at[s] <= a + 1e-6), min(range(slots), key=free_at.__getitem__))
        free_at[slot] = b
        busy[slot] += max(0.0, min(b, end) - max(a, start))
    span = end - start
    return [round(x / span, 3) if span > 0 else 0.0 for x in busy]


def measure(store: Store, run_id: str, started: float, window: float, slots: int, sample_s: float,
            latency: float) -> dict:
    """The run's figures from its own record: events with their times, candidates, plans."""
    end = started + window
    kinds = {c.id: c.kind for c in store.candidates(run_id)}
    queued, began, judged, refused = {}, {}, {}, 0
    for e in store.events(run_id):
        p = e["payload"]
        if e["type"] == "stage_changed" and p["stage"] in ("queued", "evaluate"):
            (queued if p["stage"] == "queued" else began).setdefault(p["detail"], e["ts"])
        elif e["type"] == "stage_changed" and p["stage"] == "refused":
            refused += int(p["detail"].split()[0])
        elif e["type"] == "candidate_evaluated":
            judged.setdefault(p["candidate_id"], (e["ts"], p["message"]))
    first_child = min((min(t, queued.get(c, t)) for c, t in began.items() if kinds.get(c) == "child"), default=None)
    seed = next((c for c in began if kinds.get(c) == "seed" and c in judged), None)
    seed_s = round(judged[seed][0] - began[seed], 1) if seed else None
    members = [c for c in judged if kinds.get(c) not in BASELINE_KINDS]
    in_window = [c for c in members if judged[c][0] <= end]
    twins = sum(judged[c][1].startswith("same source as") for c in members if kinds.get(c) == "child")
    intervals = [(began[c], judged[c][0]) for c in began if c in judged]
    plans = store.plans(run_id)
    chosen = [p for p in plans if p.chosen and p.created <= end]
    samples = []
    t = started
    while t <= end:
        samples.append((round(t - started, 1), sum(q <= t < began.get(c, float("inf")) for c, q in queued.items())))
        t += sample_s
    after = [n for s, n in samples if first_child is not None and started + s >= first_child]
    proposed = len(chosen) + refused
    return {
        "startup_s": round(first_child - started, 1) if first_child else None,
        "seed_s": seed_s, "startup_target_s": round(seed_s + 2 * latency, 1) if seed_s is not None else None,
        "evaluations": len(in_window), "evaluations_after_window": len(members) - len(in_window),
        "evaluations_per_hour": round(3600 * len(in_window) / window, 1),
        "busy_per_slot": slot_busy(intervals, slots, first_child, end) if first_child else [0.0] * slots,
        "accepted_plans": len(chosen), "accepted_per_minute": round(60 * len(chosen) / window, 2),
        "iterations": len({p.iteration for p in chosen}),
        "refused_plans": refused, "duplicate_children": twins,
        "refused_share": round((refused + twins) / proposed, 3) if proposed else 0.0,
        "queue": samples, "queue_mean_after_first_child": round(sum(after) / len(after), 2) if after else None,
        "queue_nonempty_share_after_first_child": round(sum(n > 0 for n in after) / len(after), 2) if after else None,
        "model_calls": sum(1 for _ in store.llm_calls(run_id)),
    }


def one_run(db: Path, args, lines: int) -> dict:
    cache = tempfile.TemporaryDirectory(prefix="kscience-cache-")  # no kernel compiled by another run
    os.environ["KSCIENCE_CACHE"] = cache.name
    store = Store(db)
    config = RunConfig(problem=args.problem, llm=f"offline@{args.latency:g}", lines=lines,
                       evaluations=args.evaluations, compiled_baseline=False, profile=args.profile,
                       name=f"{lines} line(s)")
    executor = LocalExecutor(gpus=args.gpus, cpu_workers=args.cpu_workers)
    try:
        run = Run.create(config, store=store, executor=executor)
        started = time.time()
        status = run_for(run, args.window)
        wall = time.time() - started
    finally:
        executor.shutdown()
        cache.cleanup()
    figures = measure(store, run.id, started, args.window, executor.capacity, args.sample, args.latency)
    return {"run_id": run.id, "lines": lines, "slots": executor.capacity, "status": status, "error": run.error,
            "wall_s": round(wall, 1), **figures}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="matmul")
    ap.add_argument("--latency", type=float, default=None, help="seconds per model answer (default 30)")
    ap.add_argument("--window", type=float, default=None, help="seconds each run is given (default 240)")
    ap.add_argument("--lines", default=None, metavar="K,K,...", help="runs to make (default 1 and 8 x slots)")
    ap.add_argument("--gpus", type=int, default=None, help="evaluation slots on at most N GPUs (default: all)")
    ap.add_argument("--cpu-workers", type=int, default=None, help="interpreter slots without a GPU (default 1)")
    ap.add_argument("--evaluations", type=int, default=1000, help="cap per run (the window normally ends it)")
    ap.add_argument("--profile", default="auto", help="--profile of each run (auto, ncu, none)")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between queue-length samples")
    ap.add_argument("--quick", action="store_true",
                    help="CPU check: 2 interpreter slots, 3 s model, 60 s window, 1 and 4 lines")
    ap.add_argument("--one-line-from", metavar="JSON",
                    help="compare with the 1-line run of an earlier report of this script (same settings)")
    ap.add_argument("--db", help="keep the runs in this database (default: a temporary one)")
    ap.add_argument("--out", help="JSON path (default benchmarks/results/search-throughput-<device>-<date>.json)")
    args = ap.parse_args()
    defaults = {"latency": 30.0, "window": 240.0, **(QUICK if args.quick else {})}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    device = detect()
    probe = LocalExecutor(gpus=args.gpus, cpu_workers=args.cpu_workers)
    n_slots = probe.capacity
    probe.shutdown()
    counts = [int(k) for k in (args.lines or f"1,{8 * n_slots}").split(",")]
    earlier = json.loads(Path(args.one_line_from).read_text())["runs"] if args.one_line_from else []
    date = datetime.date.today().isoformat()
    suffix = "-quick" if args.quick else ""
    name = re.sub(r"[^A-Za-z0-9]+", "_", device.name).strip("_")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"search-throughput-{name}-{date}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"benchmark": "search_throughput", "device": device.name, "date": date, "problem": args.problem,
              "settings": {"latency_s": args.latency, "window_s": args.window, "slots": n_slots, "gpus": args.gpus,
                           "cpu_workers": args.cpu_workers, "evaluation_cap": args.evaluations,
                           "model": f"offline@{args.latency:g}", "compiled_baseline": False,
                           "profile": args.profile, "quick": args.quick, "sample_s": args.sample},
              "runs": [], "targets": TARGETS}
    with tempfile.TemporaryDirectory(prefix="kscience-throughput-") as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "runs.db"
        for lines in counts:
            print(f"running {args.problem} with {lines} line(s), {n_slots} slot(s), a {args.latency:g} s model, "
                  f"{args.window:g} s window ...", file=sys.stderr, flush=True)
            report["runs"].append(one_run(db, args, lines))
            compare(report["runs"], earlier)
            out.write_text(json.dumps(report, indent=2) + "\n")  # after each run: a cut-off keeps those done
    print("\n" + "\n".join(table(report)))
    print(f"wrote {out}", file=sys.stderr)
    return 0


def compare(runs: list[dict], earlier: list[dict]) -> None:
    """Each run's evaluations per hour against the 1-line run's (this report's, else an earlier one's)."""
    one = next((r for r in [*runs, *earlier] if r["lines"] == 1), None)
    for r in runs:
        r["vs_one_line"] = (round(r["evaluations_per_hour"] / one["evaluations_per_hour"], 2)
                            if one and one["evaluations_per_hour"] else None)


def table(report: dict) -> list[str]:
    """The printed table: one row per run, then each run's queue length over time."""
    settings, runs = report["settings"], report["runs"]
    out = [f"{report['device']}  {report['problem']}  {settings['slots']} slot(s), model {settings['latency_s']:g} "
           f"s/answer, window {settings['window_s']:g} s  {report['date']}",
           f"{'lines':>5}{'start-up s':>11}{'target s':>9}{'evals':>7}{'evals/h':>9}{'x 1 line':>9}"
           f"{'accepted/min':>13}{'refused':>9}{'queue':>7}  busy per slot"]
    for r in runs:
        ratio = "-" if r["vs_one_line"] is None else f"{r['vs_one_line']:.2f}"
        startup = "-" if r["startup_s"] is None else f"{r['startup_s']:.0f}"
        target = "-" if r["startup_target_s"] is None else f"{r['startup_target_s']:.0f}"
        queue = "-" if r["queue_mean_after_first_child"] is None else f"{r['queue_mean_after_first_child']:.1f}"
        out.append(f"{r['lines']:>5}{startup:>11}{target:>9}{r['evaluations']:>7}{r['evaluations_per_hour']:>9.0f}"
                   f"{ratio:>9}{r['accepted_per_minute']:>13.2f}{r['refused_share']:>9.1%}{queue:>7}  "
                   + ", ".join(f"{b:.2f}" for b in r["busy_per_slot"]) + f"  ({r['status']})")
    out.append(f"queue length every {settings['sample_s']:g} s from each run's start:")
    out += [f"{r['lines']:>5}  " + " ".join(str(n) for _, n in r["queue"]) for r in runs]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
