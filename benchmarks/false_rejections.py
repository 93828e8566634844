"""How often does the judge reject an honest kernel, or time it out? Target: never.

Evaluates honest candidates over and over, each a full evaluation of one benchmark shape (a fresh
worker, pristine null calls, a check, timed calls, rechecks), cycling through the shapes. The corpus:

* the five built-in seeds and the honest kernels of the test suite (plain PyTorch softmax, a side
  stream joined before returning, 40 softmaxes in a row, a 20 ms kernel like GPU MODE's pmpp sort_py
  reference);
* with --kernelbench DIR, every KernelBench file below DIR as published (level1/ and level2/ of a
  KernelBench checkout): its reference as its own candidate and, on a GPU, under torch.compile as a
  run times it, with sizes lowered by --set only where this machine cannot hold them (the overrides are
  recorded);
* with --trial DIR, a real model's kernels on their problems (DIR/kernels/NN-c-ID.py on
  DIR/problems/NN_*.py, as in ../shared/real-model-kernelbench-2026-12-01/), less those whose verdict
  there was a real error of the kernel's (DIR/verdicts.json);
* with --gpumode, the published GPU MODE solutions a sweep judged ok.

Judging processes keep every GPU busy, two per GPU by default; with a single GPU, or with --neighbour, a
process beside them runs matrix products on every GPU without pause. Every verdict that is not `ok` is
kept with its message, and so is every ok evaluation whose figure is the judge's own estimate because
the worker's events fell below what its clock allows. Results:
benchmarks/results/false-rejections-<device>-<date>.json.

    python benchmarks/false_rejections.py [--count 1000] [--time-limit 450] [--neighbour]
    python benchmarks/false_rejections.py --kernelbench KernelBench/KernelBench --trial ../shared/real-model-kernelbench-2026-12-01
    python benchmarks/false_rejections.py --quick --kernelbench tests/data    # the CPU interpreter, small sizes
    python benchmarks/false_rejections.py --add-to results/false-rejections-....json  # a second part
    python benchmarks/false_rejections.py --gpumode .refk --sweep results/gpumode-sweep-NVIDIA_H100_80GB_HBM3-2026-11-24.md

A device command may run ten minutes, so a thousand evaluations may take two parts: `--add-to`
continues a part's round-robin where it stopped and writes the two parts' totals.
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import datetime
import json
import math
import multiprocessing as mp
import os
import re
import signal
import statistics
import time
from pathlib import Path

import torch

from kscience.device import detect
from kscience.evaluate.judge import contexts
from kscience.evaluate.judge.evaluation import evaluate, judging_process
from kscience.evaluate.result import EvalRequest
from kscience.problems import ProblemError, builtin_names, load_problem, shape_label
from kscience.problems.fit import needed_bytes
from kscience.problems.kernelbench import module_constants, seed_from_reference
from kscience.run.baselines import compiled_source

from gpumode_sweep import sweep_rows  # this folder is on the path of a script run from it

PARTIAL_EVERY = 50  # evaluations between writes of the results file while the run goes on
# softmax from its parts: the problem forbids calling torch.softmax
HONEST = ("import torch\n\ndef honest(x):\n    x = x.float()\n    e = (x - x.amax(-1, keepdim=True)).exp()\n"
          "    return (e / e.sum(-1, keepdim=True)).to(torch.bfloat16)\n")
# The honest kernels of tests/gpu and tests/adversarial, as (label, problem, source, needs a GPU).
TEST_KERNELS = [
    ("plain pytorch", "softmax", HONEST + "\ndef custom_kernel(data):\n    return honest(data[0])\n", False),
    ("side stream joined", "softmax", HONEST + """
_side = torch.cuda.Stream()

def custom_kernel(data):
    (x,) = data
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        y = honest(x)
    torch.cuda.current_stream().wait_stream(_side)
    y.record_stream(torch.cuda.current_stream())
    return y
""", True),
    ("heavy pytorch (40 softmaxes)", "softmax", HONEST + """
def custom_kernel(data):
    for _ in range(40):
        y = honest(data[0])
    return y
""", True),
    ("20 ms kernel", "softmax", HONEST + """
def custom_kernel(data):
    (x,) = data
    y = honest(x)
    for _ in range(400 * 4096 * 4096 // x.numel()):
        y = honest(x)
    return y
""", True),
]


def candidates(on_gpu: bool, quick: bool, extra: list | None = None) -> list[tuple[str, str, str, dict]]:
    """(label, problem, source, overrides) of every honest candidate this run evaluates: the built-in seeds,
    the honest kernels of the test suite, and `extra` (KernelBench files, a trial's kernels, GPU MODE's
    published solutions)."""
    if quick:  # cheap under the interpreter
        base = [("softmax seed", "softmax", load_problem("softmax").seed_source), TEST_KERNELS[0][:3]]
    else:
        base = [(f"{name} seed", name, load_problem(name).seed_source) for name in builtin_names()]
        base += [k[:3] for k in TEST_KERNELS if on_gpu or not k[3]]
    return [(label, name, source, {}) for label, name, source in base] + list(extra or [])


# Real errors of a kernel's own in a trial's verdicts: the kernel is no honest work to judge.
KERNEL_ERRORS = ("compile_error", "runtime_error", "wrong_answer", "crashed")


def is_kernelbench(path: Path) -> bool:
    text = path.read_text(errors="replace")
    return all(re.search(rf"^(class|def) {name}\b", text, flags=re.MULTILINE)
               for name in ("Model", "get_inputs", "get_init_inputs"))


def fitting(path: Path, budget_bytes: float) -> dict:
    """--set overrides that bring a KernelBench file's needs under `budget_bytes`: its largest integer
    constant halved until it fits (none where it fits as published, or where its needs cannot be told)."""
    sizes = {}
    for name, node in module_constants(ast.parse(path.read_text())).items():
        value = getattr(node, "value", None)
        if type(getattr(value, "value", None)) is int and value.value > 1:
            sizes[name] = value.value
    overrides: dict = {}
    for _ in range(40):
        need = needed_bytes(load_problem(str(path), overrides), interpreted=not torch.cuda.is_available())
        if need is None or need <= budget_bytes or not sizes:
            return overrides
        name = max(sizes, key=lambda n: overrides.get(n, sizes[n]))
        overrides[name] = max(1, overrides.get(name, sizes[name]) // 2)
        if all(v == 1 for v in overrides.values()) and len(overrides) == len(sizes):
            return overrides
    return overrides


def kernelbench_candidates(root: Path, on_gpu: bool, budget_bytes: float) -> list[tuple[str, str, str, dict]]:
    """Every KernelBench file below `root`: its reference as a candidate and, on a GPU, under torch.compile."""
    rows = []
    for path in sorted(p for p in root.rglob("*.py") if is_kernelbench(p)):
        try:
            overrides = fitting(path, budget_bytes)
            problem = load_problem(str(path), overrides)
        except ProblemError as exc:
            print(f"  skipped {path}: {exc}")
            continue
        label = f"kernelbench {path.parent.name}/{path.stem}"
        rows.append((label, str(path), seed_from_reference(path.read_text()), overrides))
        if on_gpu:
            rows.append((label + " (torch.compile)", str(path), compiled_source(problem), overrides))
    if not rows:
        raise SystemExit(f"false_rejections: no KernelBench file below {root}")
    return rows


def trial_candidates(trial: Path, budget_bytes: float) -> list[tuple[str, str, str, dict]]:
    """A trial's kernels (kernels/NN-c-ID.py) on their problems (problems/NN_*.py), less those its
    verdicts.json gave a real error of their own."""
    errors = {Path(v["kernel"]).name for v in json.loads((trial / "verdicts.json").read_text())
              if v.get("status") in KERNEL_ERRORS}
    rows = []
    for kernel in sorted((trial / "kernels").glob("*.py")):
        if kernel.name in errors:
            continue
        number = kernel.name.split("-", 1)[0]
        (problem,) = sorted((trial / "problems").glob(f"{number}_*.py"))
        rows.append((f"trial {kernel.stem}", str(problem), kernel.read_text(), fitting(problem, budget_bytes)))
    return rows


def gpumode_solutions(repo: Path, sweep: Path, max_s: float) -> list[tuple[str, str, str, dict]]:
    """(label, problem folder, source) of the published GPU MODE solutions that the sweep in `sweep`
    (a gpumode-sweep-*.md results file) judged ok within `max_s` seconds over every shape: honest
    kernels from outside kscience, without the minute-long builds (load_inline, large references)
    that would crowd out every other candidate."""
    rows = []
    for (name, solution), row in sweep_rows(sweep).items():
        if row["status"] == "ok" and solution != "(reference)" and row["seconds"] <= max_s:
            folder = repo / "problems" / name
            file = folder / "solutions" / solution if solution.startswith("correct/") else folder / solution
            rows.append((f"gpumode {name} {solution}", str(folder), file.read_text(), {}))
    if not rows:
        raise SystemExit(f"false_rejections: {sweep} lists no solution judged ok within {max_s:.0f} s")
    return rows


def _judge_loop(gpu, jobs, results, halt) -> None:
    """One judging process: evaluates jobs (index, label, problem, shape index, source, overrides) until
    None or `halt`."""
    judging_process()
    if gpu is not None:
        torch.cuda.set_device(gpu)
    while not halt.is_set() and (job := jobs.get()) is not None:
        i, label, name, k, source, overrides = job
        problem = load_problem(name, overrides)
        interpreted = gpu is None
        shapes = problem.shapes("benchmarks", interpreted)
        shape = shapes[k % len(shapes)]
        trimmed = dataclasses.replace(problem, benchmarks=[shape], cpu_benchmarks=[shape])
        t0 = time.monotonic()
        r = evaluate(EvalRequest(problem=problem.locator, source=source, shapes="benchmarks", overrides=overrides),
                     gpu=gpu, problem=trimmed, keep_spare=True)
        last = r.shapes[-1] if r.shapes else None
        results.put({"i": i, "label": label, "problem": name, "shape": shape_label(shape), "gpu": gpu,
                     "overrides": overrides, "status": r.status, "message": r.message,
                     "wall_s": time.monotonic() - t0, "build_s": r.build_s,
                     "time_us": last.time_us if last else None, "judge_us": last.judge_us if last else None,
                     "judge_se_us": last.judge_se_us if last else None, "clock": last.clock if last else "",
                     "inputs": last.inputs if last else "", "remeasured": last.message if last else "",
                     # the profiled pass's kernels, summed: what a timed call holds beyond them is its host work
                     "kernels_us": round(sum(k["us"] for k in last.kernels), 3) if last and last.kernels else None,
                     "phases_s": r.phases_s, "setup_s": r.device.get("setup_s") or {}})


def _margins(done: list[dict]) -> dict:
    """Over the ok GPU evaluations timed by the worker's events: how far the events lay from the judge's
    estimate, in the estimate's standard errors (median, 1st percentile, least; crosscheck.Estimate.low
    takes its figure from the judge below -4), and how many were timed by the judge instead."""
    ok = [r for r in done if r["status"] == "ok" and r.get("judge_se_us") and r.get("time_us") is not None]
    events = sorted((r["time_us"] - r["judge_us"]) / r["judge_se_us"] for r in ok if r.get("clock") == "cuda events")
    judged = sum(1 for r in ok if r.get("clock") != "cuda events")
    if not events:
        return {"timed_by_the_judge": judged}
    return {"events_less_estimate_in_se": {"median": round(events[len(events) // 2], 2),
                                           "p1": round(events[max(0, math.ceil(0.01 * len(events)) - 1)], 2),
                                           "least": round(events[0], 2)},
            "timed_by_the_judge": judged}


def over_kernels(done: list[dict]) -> dict:
    """Per candidate, over its ok GPU evaluations: the median of its timed figure over the sum of the
    kernels its profiled pass saw. What lies above 1 is what a call holds beyond its kernels (launches,
    allocations, gaps): the trial's kernels should sit within 10% of their sums plus launch overhead."""
    ratios = collections.defaultdict(list)
    for r in done:
        if r["status"] == "ok" and r.get("kernels_us") and r.get("time_us"):
            ratios[r["label"]].append(r["time_us"] / r["kernels_us"])
    return {label: round(statistics.median(v), 3) for label, v in ratios.items()}


def busy_neighbour(gpus: list[int], stop) -> None:
    """A busy neighbour: back-to-back 4096^3 bf16 matrix products on every GPU until told to stop."""
    mats = []
    for g in gpus:
        a = torch.randn(4096, 4096, device=f"cuda:{g}", dtype=torch.bfloat16)
        mats.append((a, torch.randn_like(a)))
    while not stop.is_set():
        for a, b in mats:
            for _ in range(20):
                a @ b
        for g in gpus:
            torch.cuda.synchronize(g)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="evaluations to run (default 1000)")
    ap.add_argument("--time-limit", type=float, default=450.0, help="stop submitting after this many seconds")
    ap.add_argument("--neighbour", action="store_true", help="also run a GPU load beside the judges (always "
                                                              "on with a single GPU)")
    ap.add_argument("--per-gpu", type=int, default=2, help="judging processes per GPU (default 2: each GPU runs "
                                                            "two evaluations at once, busier than a search)")
    ap.add_argument("--quick", action="store_true", help="the CPU interpreter: 4 evaluations, 2 candidates")
    ap.add_argument("--add-to", help="an earlier part's results file: continue after it and report the sum")
    ap.add_argument("--kernelbench", type=Path, metavar="DIR", help="also every KernelBench file below DIR, its "
                    "reference and (on a GPU) its torch.compile")
    ap.add_argument("--trial", type=Path, metavar="DIR", help="also a trial's kernels on its problems "
                    "(DIR/kernels, DIR/problems, DIR/verdicts.json)")
    ap.add_argument("--memory-share", type=float, default=0.25, help="a KernelBench file's largest shape is "
                    "lowered with --set until it needs at most this share of the free memory per judge "
                    "(default 0.25; --quick: 16 MiB)")
    ap.add_argument("--gpumode", type=Path, metavar="REPO", help="also the published GPU MODE solutions that "
                    "--sweep judged ok, from this reference-kernels extract")
    ap.add_argument("--sweep", type=Path, metavar="FILE", help="a gpumode-sweep-*.md results file (with --gpumode)")
    ap.add_argument("--gpumode-max-s", type=float, default=15.0, metavar="SECONDS",
                    help="only solutions whose sweep evaluation took at most this long (default 15)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    earlier = json.loads(Path(args.add_to).read_text()) if args.add_to else None
    first = earlier["achieved"] if earlier else 0
    device = detect()
    on_gpu = not device.interpreted
    if args.quick:
        args.count = min(args.count, 4)
    gpus: list = list(range(torch.cuda.device_count())) if on_gpu else [None]
    slots = [g for g in gpus for _ in range(args.per_gpu)] if on_gpu else gpus
    neighbour = on_gpu and (args.neighbour or len(gpus) == 1)
    if bool(args.gpumode) != bool(args.sweep):
        raise SystemExit("false_rejections: --gpumode and --sweep go together")
    if on_gpu:
        budget = args.memory_share * torch.cuda.mem_get_info()[0] / args.per_gpu
    else:
        budget = 16 * 2**20 if args.quick else args.memory_share * os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    extra = gpumode_solutions(args.gpumode, args.sweep, args.gpumode_max_s) if args.gpumode else []
    if args.kernelbench:
        extra += kernelbench_candidates(args.kernelbench, on_gpu, budget)
    if args.trial:
        extra += trial_candidates(args.trial, budget)
    pool = candidates(on_gpu, args.quick, extra)
    if args.quick:
        args.count = max(args.count, len(pool)) if extra else args.count
    ctx = mp.get_context("spawn")
    jobs, results = ctx.Queue(), ctx.Queue()
    jobs.cancel_join_thread()  # jobs left unread at the time limit must not hold this process at its exit
    for i in range(first, first + args.count):  # round-robin over candidates; each cycles through its shapes
        label, name, source, overrides = pool[i % len(pool)]
        jobs.put((i, label, name, i // len(pool), source, overrides))
    stop = ctx.Event()
    busy = ctx.Process(target=busy_neighbour, args=(gpus, stop), daemon=True) if neighbour else None
    if busy:
        busy.start()
    # At the time limit `halt` stops every judge after its evaluation under way. (Emptying `jobs` is
    # not enough: the feeder thread keeps writing queued jobs into the pipe after a get finds it empty,
    # and on 2026-11-26 the judges went on for 80 s past the limit until the device command's timeout.)
    halt = ctx.Event()
    judges = [ctx.Process(target=_judge_loop, args=(g, jobs, results, halt)) for g in slots]
    for p in judges:
        p.start()

    def _cut_off(*_):  # a device command's `timeout`: no neighbour may outlive this and load the next step's GPU
        for child in judges + ([busy] if busy else []):
            child.terminate()
        os._exit(143)

    signal.signal(signal.SIGTERM, _cut_off)
    t0, done = time.monotonic(), []
    stopped_early = False
    while len(done) < args.count:
        if time.monotonic() - t0 > args.time_limit and not stopped_early:
            stopped_early = True  # evaluations under way finish; nothing new starts
            halt.set()
        if stopped_early and all(not p.is_alive() for p in judges):
            break
        try:
            r = results.get(timeout=1.0)
        except Exception:
            continue
        done.append(r)
        if len(done) == 1 and on_gpu:  # by now every judge and worker holds its context
            print("contexts on each GPU by the driver's count (contexts.listed): "
                  + ", ".join(f"GPU {g}: {contexts.listed(g)}" for g in gpus))
        if r["status"] != "ok":
            print(f"  #{r['i']} {r['label']} {r['shape']}: {r['status']}: {r['message']}")
        if len(done) % PARTIAL_EVERY == 0:
            report(args, device, gpus, len(slots), neighbour, done, time.monotonic() - t0, stopped_early, earlier,
                   partial=True)
    wall = time.monotonic() - t0
    report(args, device, gpus, len(slots), neighbour, done, wall, stopped_early, earlier)  # before any wait
    for _ in judges:
        jobs.put(None)
    for p in judges:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
    if busy:
        stop.set()
        busy.join(timeout=30)


def report(args, device, gpus, n_judges, neighbour, done, wall, stopped_early, earlier=None, partial=False) -> None:
    """Print the table (unless `partial`) and write the results file; `partial` marks a file written
    while evaluations go on, so that a run cut off at a device command's limit still leaves one."""
    by = collections.defaultdict(collections.Counter)
    for r in done:
        by[r["label"]][r["status"]] += 1
    not_ok = [r for r in done if r["status"] != "ok"]
    walls = {label: [sum(r["wall_s"] for r in done if r["label"] == label), sum(c.values())] for label, c in by.items()}
    setting = {"device": device.name, "gpus": len(gpus) if gpus != [None] else 0, "judging_processes": n_judges,
               "busy_neighbour": neighbour}  # per part: the parts of one sum may run on different machines
    parts = [{**setting, "achieved": len(done), "wall_s": round(wall, 1), "stopped_by_time_limit": stopped_early}]
    if earlier:  # the earlier part's figures join this one's
        for label, counts in earlier["verdicts"].items():
            by[label].update(counts)
            per = earlier["wall_per_evaluation_s"].get(label, 0.0)
            w = walls.setdefault(label, [0.0, 0])
            w[0] += per * sum(counts.values())
            w[1] += sum(counts.values())
        kept = earlier.get("parts", [{k: earlier[k] for k in ("achieved", "wall_s", "stopped_by_time_limit")}])
        parts = [{**{k: earlier[k] for k in setting}, **part} for part in kept] + parts
        done_extra, asked = earlier["achieved"], args.count + earlier["asked"]
        wall += earlier["wall_s"]
    else:
        done_extra, asked = 0, args.count
    if not partial:
        print(f"\n{device.name}: {len(done) + done_extra} evaluations of {asked} asked, {wall:.0f} s, "
              f"{n_judges} judging process(es) on {len(gpus)} device(s){', busy neighbour' if neighbour else ''}")
        width = max([len("candidate")] + [len(label) for label in by])
        print(f"{'candidate':{width}s} {'evaluations':>11s}  verdicts")
        for label, counts in by.items():
            print(f"{label:{width}s} {sum(counts.values()):11d}  {dict(counts)}")
    phases = collections.defaultdict(list)  # where an evaluation's wall went, this part's evaluations
    for r in done:
        for name, sec in (r.get("phases_s") or {}).items():
            phases[name].append(sec)
    # Inside the import, by the worker's own clock: device detection, the problem, the CUDA context,
    # the integrity snapshot, the candidate's import.
    setups = collections.defaultdict(list)
    for r in done:
        for step, sec in (r.get("setup_s") or {}).items():
            if sec is not None:
                setups[step].append(sec)
    setup_medians = {k: round(statistics.median(v), 3) for k, v in setups.items()}
    if not partial and phases:
        print("median seconds per evaluation by phase: "
              + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in phases.items())
              + (f" (inside the import, by the worker's clock: {setup_medians})" if setup_medians else ""))
    believed = [{k: r[k] for k in ("label", "shape", "clock", "remeasured")} for r in done
                if r["status"] == "ok" and r["remeasured"].startswith("measured")]
    not_ok = [{k: r[k] for k in ("label", "problem", "shape", "overrides", "gpu", "status", "message")}
              for r in not_ok]
    if earlier:
        believed, not_ok = earlier["remeasured_then_ok"] + believed, earlier["not_ok"] + not_ok
    margins = _margins(done)
    if not partial:
        print(f"not ok: {len(not_ok)}; measured more than once and then believed: {len(believed)}")
        ratios = over_kernels(done)
        if ratios:
            print("timed figure over the profiled kernels' sum (median per candidate): "
                  + ", ".join(f"{label} {ratio}" for label, ratio in ratios.items()))
        if margins:
            print(f"the worker's events against the judge's estimate, in its standard errors (the judge's own "
                  f"figure below -4 and a few percent): {margins}")
    stamp = datetime.date.today().isoformat()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", device.name).strip("_")
    out = Path(args.out) / f"false-rejections-{name}-{stamp}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "device": " + ".join(dict.fromkeys(part["device"] for part in parts)), "date": stamp, "torch": torch.__version__,
        **{k: v for k, v in setting.items() if k != "device"}, "asked": asked, "achieved": len(done) + done_extra, "partial": partial,
        "time_limit_s": args.time_limit, "stopped_by_time_limit": stopped_early, "wall_s": round(wall, 1),
        "parts": parts, "verdicts": {label: dict(c) for label, c in by.items()}, "not_ok": not_ok,
        "remeasured_then_ok": believed, "margins_this_part": margins, "time_over_kernels_this_part": over_kernels(done),
        "phases_median_s_this_part": {k: round(statistics.median(v), 3) for k, v in phases.items()},
        "worker_setup_median_s_this_part": setup_medians,
        "wall_per_evaluation_s": {label: round(w / max(1, n), 2) for label, (w, n) in walls.items()},
    }, indent=1))
    if not partial:
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
