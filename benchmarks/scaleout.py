"""Does evaluation scale out, and does a busy neighbour change a timing?

Throughput: one stream of candidates (copies of a problem's seed kernel) is evaluated
with 1 and with 2 workers, through the local executor and through Ray, keeping `capacity`
evaluations in flight the way the scientist loop does; the result is evaluations per
minute and the 2-worker speedup (target >= 1.9x). The compile cache is warmed once first,
so every run sees the same cache.

Isolation: one kernel is evaluated on the first GPU alone, then while the second GPU runs
a busy loop of evaluations, then alone again; its geomean time must agree within 1%.

Host-side scaling: `--cpu-workers 1,2,4,8` runs the same stream on that many CPU-interpreter
slots instead of GPUs, on any machine with enough cores. Each slot has its own judge process,
so N slots should give close to N times one slot's evaluations per minute, and the mean time
of every phase (import, check, time, recheck) should not grow with N. Every slot is warmed
by one evaluation first (judge process, torch import, spare worker), so the stream measures
steady state; the warm-up's own time is reported as `first_evaluation_s`.

    python benchmarks/scaleout.py            # two GPUs: writes benchmarks/results/scaleout-<device>-<date>.json
    python benchmarks/scaleout.py --executors local,ray --skip-isolation   # one GPU: local vs Ray per evaluation
    python benchmarks/scaleout.py --executors local --cpu-workers 1,2,4,8  # host-side scaling, interpreter slots
    python benchmarks/scaleout.py --quick --out X.json   # tiny CPU settings, Triton interpreter

Without a GPU nothing is written unless --out is given: interpreter numbers are no result.
Ray runs only where it is installed (pip install kscience[ray]).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path

import torch
import triton

from kscience.device import detect
from kscience.evaluate.executors.base import Executor, LocalExecutor, visible_gpus
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest, EvalResult
from kscience.problems import load_problem, shape_label

SPEEDUP_TARGET = 1.9
ISOLATION_TOLERANCE = 0.01


def candidate_stream(problem: str, n: int, shapes: str) -> list[EvalRequest]:
    seed = load_problem(problem).seed_source
    # The same source each time: a per-candidate edit could change Triton's cache key, and then the
    # second run would find kernels the first one compiled. Evaluations share nothing else.
    return [EvalRequest(problem=problem, source=seed, shapes=shapes, candidate_id=f"c{i}") for i in range(n)]


def run_stream(executor: Executor, requests: list[EvalRequest]) -> tuple[list[EvalResult], float]:
    """Evaluate all requests keeping exactly `capacity` in flight; returns results and wall seconds."""
    pending, in_flight, results = list(requests), set(), []
    t0 = time.monotonic()
    while pending or in_flight:
        while pending and len(in_flight) < executor.capacity:
            in_flight.add(executor.submit(pending.pop(0)))
        done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
        results += [f.result() for f in done]
    return results, time.monotonic() - t0


def mean_phases(results: list[EvalResult]) -> dict[str, float]:
    """Mean seconds per phase over the evaluations (a phase an evaluation lacks counts as 0)."""
    names = sorted({k for r in results for k in r.phases_s})
    return {k: round(statistics.fmean(r.phases_s.get(k, 0.0) for r in results), 3) for k in names}


def host_cpus() -> dict:
    """What the host really grants: affinity and the cgroup's CPU quota (a 16-core machine may allow less)."""
    quota = None
    with contextlib.suppress(OSError):
        quota = Path("/sys/fs/cgroup/cpu.max").read_text().strip()
    return {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "cgroup_cpu_max": quota,
            "loadavg": os.getloadavg()}


def make_local(workers: int, on_gpu: bool) -> Executor:
    return LocalExecutor(gpus=workers) if on_gpu else LocalExecutor(cpu_workers=workers)


def make_ray(workers: int, on_gpu: bool) -> Executor:
    from kscience.evaluate.executors.ray_cluster import RayExecutor

    return RayExecutor(gpus=workers) if on_gpu else RayExecutor(cpu_workers=workers)


def measure_throughput(name: str, make, requests: list[EvalRequest], on_gpu: bool,
                       counts: tuple[int, ...] = (1, 2)) -> list[dict]:
    rows = []
    for workers in counts:
        with make(workers, on_gpu) as executor:
            if executor.capacity != workers:
                print(f"  {name}: only {executor.capacity} worker(s) available, skipping {workers}")
                continue
            # One evaluation per slot first: judge processes (or Ray actors) start, import torch and
            # start their spare worker. The stream after it measures what a long search sees.
            warm, warm_wall = run_stream(executor, requests[:workers])
            results, wall = run_stream(executor, requests)
        failed = [r for r in results + warm if not r.ok]
        rows.append({"executor": name, "workers": workers, "evaluations": len(results),
                     "ok": len(results) - sum(not r.ok for r in results), "wall_s": wall,
                     "per_minute": 60 * len(results) / wall,
                     "mean_evaluation_s": statistics.fmean(r.wall_s for r in results),
                     "phases_s": mean_phases(results), "first_evaluation_s": warm_wall,
                     "first_failure": f"{failed[0].status}: {failed[0].message}" if failed else None})
        print(f"  {name} x{workers}: {rows[-1]['per_minute']:.1f} evaluations/min, "
              f"{rows[-1]['mean_evaluation_s']:.2f} s each {rows[-1]['phases_s']} ({len(failed)} not ok)")
    return rows


def speedup(rows: list[dict], name: str) -> dict[int, float]:
    """Evaluations per minute with N workers over that with one, for every N measured."""
    rate = {r["workers"]: r["per_minute"] for r in rows if r["executor"] == name}
    return {n: rate[n] / rate[1] for n in sorted(rate) if n > 1 and 1 in rate}


def measure_isolation(problem: str, busy_problem: str, rounds: int, probe_gpu: int | None,
                      busy_gpu: int | None) -> dict:
    """Probe timings alone, with the other GPU busy, and alone again (drift shows up as alone/alone)."""
    probe = EvalRequest(problem=problem, source=load_problem(problem).seed_source, shapes="benchmarks")
    busy = EvalRequest(problem=busy_problem, source=load_problem(busy_problem).seed_source, shapes="all")

    def probes() -> list[EvalResult]:
        results = [evaluate(probe, gpu=probe_gpu) for _ in range(rounds)]
        bad = [r for r in results if not r.ok]
        if bad:
            raise RuntimeError(f"probe evaluation failed: {bad[0].status}: {bad[0].message}")
        return results

    before = probes()
    stop, busy_results = threading.Event(), []

    def busy_loop():
        while not stop.is_set():
            busy_results.append(evaluate(busy, gpu=busy_gpu))

    neighbour = threading.Thread(target=busy_loop, daemon=True)
    neighbour.start()
    during = probes()
    stop.set()
    neighbour.join()
    after = probes()
    alone = before + after

    shapes = []
    for i, s in enumerate(alone[0].shapes):
        alone_us = statistics.median(r.shapes[i].time_us for r in alone)
        busy_us = statistics.median(r.shapes[i].time_us for r in during)
        shapes.append({"shape": shape_label(s.shape), "alone_us": alone_us, "busy_us": busy_us,
                       "difference": busy_us / alone_us - 1})
    alone_geo = statistics.median(r.geomean_us for r in alone)
    busy_geo = statistics.median(r.geomean_us for r in during)
    drift = statistics.median(r.geomean_us for r in after) / statistics.median(r.geomean_us for r in before) - 1
    return {"problem": problem, "busy_problem": busy_problem, "rounds": rounds, "probe_gpu": probe_gpu,
            "busy_gpu": busy_gpu, "alone_geomean_us": alone_geo, "busy_geomean_us": busy_geo,
            "difference": busy_geo / alone_geo - 1, "alone_drift": drift, "shapes": shapes,
            "geomeans_us": {"before": [r.geomean_us for r in before], "during": [r.geomean_us for r in during],
                            "after": [r.geomean_us for r in after]},
            "busy_evaluations": len(busy_results), "busy_ok": sum(r.ok for r in busy_results),
            "agrees": abs(busy_geo / alone_geo - 1) <= ISOLATION_TOLERANCE}


def print_tables(report: dict) -> None:
    print(f"\n{report['device']}  ({report['gpus']} GPU(s), {report['host']['cpus']} CPUs)  {report['date']}")
    print(f"{'executor':<10}{'workers':>8}{'evals':>7}{'ok':>5}{'wall s':>9}{'evals/min':>11}{'s/eval':>8}"
          f"{'first s':>9}  mean phase s")
    for r in report["throughput"]:
        print(f"{r['executor']:<10}{r['workers']:>8}{r['evaluations']:>7}{r['ok']:>5}{r['wall_s']:>9.1f}"
              f"{r['per_minute']:>11.1f}{r['mean_evaluation_s']:>8.2f}{r['first_evaluation_s']:>9.1f}  "
              + " ".join(f"{k} {v:.2f}" for k, v in r["phases_s"].items()))
    for name, by_count in report["speedup"].items():
        for n, value in by_count.items():
            verdict = "meets" if value >= SPEEDUP_TARGET * n / 2 else "misses"
            print(f"speedup {name}: {value:.2f}x with {n} workers ({verdict} {SPEEDUP_TARGET * n / 2:.1f}x, "
                  f"i.e. {SPEEDUP_TARGET / 2:.0%} per worker)")
    local = {r["workers"]: r["mean_evaluation_s"] for r in report["throughput"] if r["executor"] == "local"}
    ray = {r["workers"]: r["mean_evaluation_s"] for r in report["throughput"] if r["executor"] == "ray"}
    for n in sorted(set(local) & set(ray)):
        print(f"ray vs local, {n} worker(s): {ray[n] / local[n]:.2f}x the seconds per evaluation (target <= 1.2x)")
    iso = report.get("isolation")
    if iso:
        probe_on, busy_on = (f"GPU {g}" if g is not None else "the CPU" for g in (iso["probe_gpu"], iso["busy_gpu"]))
        print(f"\nisolation: {iso['problem']} on {probe_on}, busy loop of {iso['busy_problem']} on {busy_on} "
              f"({iso['busy_evaluations']} evaluations)")
        print(f"{'shape':<28}{'alone us':>12}{'busy us':>12}{'diff':>9}")
        for s in iso["shapes"]:
            print(f"{s['shape']:<28}{s['alone_us']:>12.2f}{s['busy_us']:>12.2f}{s['difference']:>9.2%}")
        verdict = "agrees" if iso["agrees"] else "DISAGREES"
        print(f"{'geomean':<28}{iso['alone_geomean_us']:>12.2f}{iso['busy_geomean_us']:>12.2f}"
              f"{iso['difference']:>9.2%}  {verdict} within {ISOLATION_TOLERANCE:.0%}; "
              f"alone-vs-alone drift {iso['alone_drift']:.2%}")
    for note in report["skipped"]:
        print(f"skipped: {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="softmax", help="whose seed makes the candidate stream and the probe")
    ap.add_argument("--busy-problem", default="matmul", help="whose seed the busy neighbour evaluates")
    ap.add_argument("--candidates", type=int, default=24, help="length of the candidate stream")
    ap.add_argument("--shapes", choices=("tests", "benchmarks", "all"), default="all", help="shapes per candidate")
    ap.add_argument("--rounds", type=int, default=3, help="probe evaluations per isolation phase")
    ap.add_argument("--executors", default="local,ray", choices=("local", "ray", "local,ray", "ray,local"),
                    help="which executors to measure, in order")
    ap.add_argument("--cpu-workers", metavar="N,N,...",
                    help="measure CPU-interpreter slots of these counts (e.g. 1,2,4,8) instead of GPUs")
    ap.add_argument("--skip-isolation", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny settings that finish in minutes on a CPU")
    ap.add_argument("--out", help="JSON path (default: benchmarks/results/scaleout-<device>-<date>.json on a GPU)")
    args = ap.parse_args()
    if args.quick:
        args.candidates, args.shapes, args.rounds, args.busy_problem = 4, "tests", 1, args.problem
    counts = (1, 2)
    if args.cpu_workers:
        counts = tuple(int(n) for n in args.cpu_workers.split(","))
        # Every process started from here on (judges, workers, Ray's) runs on the interpreter.
        os.environ.update(KSCIENCE_DEVICE="cpu", TRITON_INTERPRET="1")
        args.skip_isolation = True
        if args.shapes == "all":
            args.shapes = "tests"  # the interpreter takes minutes on benchmark shapes

    device, gpus = detect(), visible_gpus()
    on_gpu = not device.interpreted
    date = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else None
    if out is None and on_gpu:
        slug = re.sub(r"[^a-z0-9]+", "-", device.name.lower()).strip("-")
        out = Path(__file__).parent / "results" / f"scaleout-{slug}-{date}.json"
    if args.cpu_workers and out is None and not args.quick:
        host = re.sub(r"[^a-z0-9]+", "-", platform.node().lower()).strip("-")
        out = Path(__file__).parent / "results" / f"scaleout-cpu-slots-{host}-{date}.json"
    report = {"device": device.name, "date": date, "gpus": len(gpus),
              "host": {**host_cpus(), "python": platform.python_version(), "torch": torch.__version__,
                       "triton": triton.__version__},
              "settings": {k: v for k, v in vars(args).items() if k != "out"},
              "throughput": [], "speedup": {}, "isolation": None, "skipped": []}

    def save() -> None:  # after every stage, so a run cut short still leaves what it measured
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2))

    two_devices = len(gpus) >= 2 or not on_gpu
    if not two_devices:
        report["skipped"].append(f"{len(gpus)} GPU visible: 2-worker runs and isolation need two")
    requests = candidate_stream(args.problem, max(args.candidates, max(counts)), args.shapes)
    warm = evaluate(requests[0], gpu=gpus[0] if gpus else None)  # fills the compile cache every run shares
    if not warm.ok:
        print(f"the seed of {args.problem} does not pass: {warm.status}: {warm.message}", file=sys.stderr)
        return 1
    report["warmup_evaluation_s"] = warm.wall_s
    report["evaluation_device"] = warm.device  # includes how the worker was sandboxed

    for name in args.executors.split(","):
        print(f"throughput through {name} ({len(requests)} candidates, shapes={args.shapes})")
        if name == "local":
            report["throughput"] += measure_throughput(name, make_local, requests, on_gpu, counts)
        elif importlib.util.find_spec("ray") is None:
            report["skipped"].append("ray: not installed (pip install kscience[ray])")
            continue
        else:
            import ray

            ray.init(include_dashboard=False)  # one cluster for both runs: each executor joins it
            try:
                report["throughput"] += measure_throughput(name, make_ray, requests, on_gpu, counts)
            finally:
                ray.shutdown()
        value = speedup(report["throughput"], name)
        if value:
            report["speedup"][name] = value
        save()

    if args.skip_isolation:
        report["skipped"].append("isolation: --skip-isolation")
    elif two_devices:
        print("isolation: probe alone, beside a busy neighbour, alone again")
        probe_gpu, busy_gpu = (gpus[0], gpus[1]) if on_gpu else (None, None)
        report["isolation"] = measure_isolation(args.problem, args.busy_problem, args.rounds, probe_gpu, busy_gpu)
        if not on_gpu:
            report["skipped"].append("isolation on a CPU shares the cores: its difference is no GPU result")
    save()
    print_tables(report)
    if out:
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
