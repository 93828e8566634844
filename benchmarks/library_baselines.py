"""Does the best kernel beat what a user would install? Every baseline of every built-in, then offline runs.

Part `baselines`: each built-in's baselines judged by the same judge as kernels (PyTorch eager, torch.compile
with --compile, the vendor library, every installed library: Liger-Kernel, QuACK), with the versions of
everything that ran them; a library that is not installed is said in one line. For fp8_blockscale_gemm also
the vendor GEMM alone: the same `torch._scaled_mm` call judged on operands built K-major beforehand, beside the
vendor row that pays for its copies.
Part `runs`: `kscience run PROBLEM --llm offline --evaluations N` per built-in (the CLI, as a user runs it),
then the best kernel against each baseline the run timed, and whether it beats every one.
Results: benchmarks/results/library-baselines-<device>-<date>.{json,md}.

    python benchmarks/library_baselines.py [--part baselines,runs] [--problems softmax,rmsnorm] [--compile]
        [--evaluations 30] [--db library-runs.db] [--gpus 4] [--gpus-per-run 1] [--time-limit 500]

On a machine of four GPUs one command runs every built-in's offline run at once, four at a time, each within
--time-limit (a run that reaches it is reported with what it had, as stopped).

The GPU machine has no network: carry the wheels (`pip download liger-kernel quack-kernels -d wheels`, then
`pip install --no-index --find-links wheels liger-kernel quack-kernels` there). liger-kernel is pure Python
(needs torch and triton, already there); quack-kernels needs nvidia-cutlass-dsl (and its
nvidia-cutlass-dsl-libs-* wheels), apache-tvm-ffi, torch-c-dlpack-ext and einops.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import queue
import subprocess
import sys
from pathlib import Path

from kscience.device import detect
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.problems import builtin_names, load_problem
from kscience.problems.libraries import installed_version, missing_line
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.run.baselines import (compiled_source, library_candidate, reference_source, vendor_alone_source,
                                    vendor_source, vendor_title)

DISTRIBUTIONS = ("torch", "triton", "liger-kernel", "quack-kernels", "nvidia-cutlass-dsl", "apache-tvm-ffi")


def versions() -> dict:
    return {d: installed_version(d) or "not installed" for d in DISTRIBUTIONS}


def judged(problem, source: str, tolerance=None) -> dict:
    result = evaluate(EvalRequest(problem=problem.locator, source=source, shapes="all", tolerance=tolerance,
                                  overrides=dict(problem.overrides), baseline=True), problem=problem)
    return {"status": result.status, "us": result.geomean_us, "message": result.message[:200]}


def baseline_rows(name: str, with_compile: bool) -> list[dict]:
    problem = load_problem(name)
    rows = [dict(problem=name, baseline="PyTorch eager", **judged(problem, reference_source(problem)))]
    if with_compile:
        rows.append(dict(problem=name, baseline="torch.compile", **judged(problem, compiled_source(problem))))
    if problem.vendor_kernel is not None:
        rows.append(dict(problem=name, baseline=f"vendor: {vendor_title(problem)}",
                         **judged(problem, vendor_source(problem), problem.tolerance_for("vendor"))))
    alone = vendor_alone_source(problem)
    if alone:  # judged on inputs built in its layout, as a run judges it
        laid_out = load_problem(name, problem.overrides_for("vendor_alone"))
        rows.append(dict(problem=name, baseline=f"vendor alone: {problem.vendor_alone.name}",
                         **judged(laid_out, alone, problem.tolerance_for("vendor_alone"))))
    for lib in problem.libraries:
        missing = missing_line(lib)
        if missing:
            print(missing, flush=True)
            rows.append(dict(problem=name, baseline=lib.name, status="not installed", us=None, message=missing))
            continue
        rows.append(dict(problem=name, baseline=lib.title, **judged(problem, library_candidate(lib),
                                                                     list(lib.tolerance) if lib.tolerance else None)))
    for r in rows:
        print(f"{name:<20} {r['baseline'][:70]:<70} {r['status']:<14} {fmt(r['us']):>10}  {r['message'][:80]}",
              flush=True)
    return rows


def run_row(name: str, evaluations: int, db: str, time_limit_s: float | None = None,
            gpus: list[int] | None = None) -> dict:
    """One offline run of `name` through the CLI, in a database of its own; a run that reaches `time_limit_s`
    stops as a user's would and is reported with what it had, marked `stopped`. A run of the same name the
    database already holds, stopped, is resumed instead (a run longer than one device command)."""
    run_name = f"library-baselines-{name}-{evaluations}"
    db = str(Path(db).with_name(f"{Path(db).stem}-{name}{Path(db).suffix or '.db'}"))
    earlier = None
    if Path(db).exists():
        with Store(db) as store:
            earlier = next((r for r in store.list_runs() if r.name == run_name), None)
    if earlier is not None:
        cmd = [sys.executable, "-m", "kscience.cli.main", "resume", earlier.id, "--db", db]
    else:
        cmd = [sys.executable, "-m", "kscience.cli.main", "run", name, "--llm", "offline", "--evaluations",
               str(evaluations), "--db", db, "--name", run_name]
    if time_limit_s:
        cmd += ["--time-limit", f"{time_limit_s:g}"]
    if gpus and len(gpus) > 1:
        cmd += ["--gpus", str(len(gpus))]
    Path(db).parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))} if gpus else {}))
    with open(Path(db).with_suffix(".log"), "a" if earlier else "w") as log:  # the runs print at once: one log each
        code = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    with Store(db) as store:
        run = next(r for r in store.list_runs() if r.name == run_name)
        m = Snapshot.load(store, run.id).metrics()
    rivals = {"eager": m.eager_us, "torch.compile": m.compiled_us, "vendor": m.vendor_us,
              **{lib.label: lib.us for lib in m.libraries}}
    timed = [us for us in rivals.values() if us]
    return {"problem": name, "run_id": run.id, "exit_code": code, "status": run.status, "best_us": m.best_us,
            "baselines": rivals, "fastest_baseline": m.fastest_baseline,
            "fastest_baseline_us": m.fastest_baseline_us,
            "beats_every_baseline": bool(m.best_us and timed and m.best_us < min(timed))}


def all_runs(names: list[str], args) -> list[dict]:
    """One run per problem, each on `args.gpus_per_run` GPUs of its own, as many at once as `args.gpus` holds."""
    gpus = queue.SimpleQueue()
    k = max(1, args.gpus_per_run)
    for first in range(0, args.gpus - k + 1, k) if args.gpus else []:
        gpus.put(list(range(first, first + k)))
    if not args.gpus:
        gpus.put(None)

    def on_a_gpu(name: str) -> dict:
        gpu = gpus.get()
        try:
            return run_row(name, args.evaluations, args.db, args.time_limit, gpu)
        finally:
            gpus.put(gpu)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, (args.gpus or 1) // k)) as pool:
        return list(pool.map(on_a_gpu, names))


def fmt(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def markdown(title: str, vers: dict, baselines: list[dict], runs: list[dict]) -> str:
    lines = [f"# {title}", "", "Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()), ""]
    if baselines:
        lines += ["| problem | baseline | status | geomean us | note |", "|---|---|---|---|---|"]
        lines += [f"| {r['problem']} | {r['baseline']} | {r['status']} | {fmt(r['us'])} | {r['message']} |"
                  for r in baselines]
    if runs:
        lines += ["", "| problem | run | best us | fastest baseline | its us | beats every baseline |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['problem']} | {r['status']} | {fmt(r['best_us'])} | {r['fastest_baseline']} "
                  f"| {fmt(r['fastest_baseline_us'])} | {'yes' if r['beats_every_baseline'] else 'no'} |" for r in runs]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="baselines,runs")
    ap.add_argument("--problems", default=",".join(builtin_names()))
    ap.add_argument("--compile", action="store_true", help="time torch.compile in part baselines too (minutes)")
    ap.add_argument("--evaluations", type=int, default=30)
    ap.add_argument("--db", default="library-runs.db", help="runs go to <stem>-<problem>.db, each with its .log")
    ap.add_argument("--gpus", type=int, default=0,
                    help="part runs: the GPUs they share out, --gpus-per-run each (0: one run at a time)")
    ap.add_argument("--gpus-per-run", type=int, default=1, help="part runs: GPUs each run judges on (its --gpus)")
    ap.add_argument("--time-limit", type=float, default=None, help="part runs: seconds each run may take")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    parts, names = args.part.split(","), args.problems.split(",")
    device, stamp, vers = detect(), datetime.date.today().isoformat(), versions()
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()), flush=True)
    baselines = [r for n in names for r in baseline_rows(n, args.compile)] if "baselines" in parts else []
    runs = all_runs(names, args) if "runs" in parts else []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"library-baselines-{device.name.replace(' ', '_').replace('(', '').replace(')', '')}-{stamp}"
    title = f"Every baseline of every built-in, and offline@{args.evaluations} against them, {device.name}, {stamp}"
    stem.with_suffix(".json").write_text(json.dumps({"device": device.name, "date": stamp, "versions": vers,
                                                     "baselines": baselines, "runs": runs}, indent=2))
    stem.with_suffix(".md").write_text(markdown(title, vers, baselines, runs))
    print(markdown(title, vers, baselines, runs))
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
