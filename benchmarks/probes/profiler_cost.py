"""Where do the seconds of "timing each launched kernel" go, and what would one profiler session save?

On an H100 (benchmarks/results/README.md, 2026-11-27) the `kernels` phase took 4-6.6 s of a 7-10 s
evaluation of a matmul, softmax or rmsnorm child: about half of the slot's time goes on advice to the
scientist. The worker profiles each timed shape in its own torch.profiler session
(`kernel_times._cuda_launches`). This times, in a fresh process per problem and mode as a worker is:

  per-shape    what the worker does now: per shape, inputs, a warm-up call, a session of 3 calls
  one-session  every shape's calls in one session, each shape inside its own record_function range

and, per mode, the session's parts: the first `import torch.profiler`, entering, the calls, leaving and
reading the events. It also times 200 launches of a small kernel with CUDA events before any profiler
and after one, so a profiler warmed early (while a spare worker waits) could be judged for its effect on
later timed calls.

    python benchmarks/probes/profiler_cost.py [--problems matmul,softmax] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _one(problem_name: str, mode: str) -> dict:
    import torch

    warm = {}
    if mode.startswith("warm-"):  # a session with nothing in it, before this process touches the GPU
        t = time.perf_counter()
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            pass
        warm = {"warm_s": round(time.perf_counter() - t, 3), "context_after_warm": torch.cuda.is_initialized()}
        mode = mode[len("warm-"):]

    from kscience.problems import load_problem

    problem = load_problem(problem_name)
    import importlib.util
    import tempfile

    path = Path(tempfile.mkdtemp()) / "seed.py"  # Triton reads a kernel's source from its file
    path.write_text(problem.seed_source)
    spec = importlib.util.spec_from_file_location("seed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, problem.entry)
    shapes = problem.benchmarks
    data = [problem.generate_input(1000 + i, "cuda", **s) for i, s in enumerate(shapes)]
    for d in data:  # compiled and warm, as after the timed calls
        fn(problem.call_data(list(d)))
    torch.cuda.synchronize()

    def launches(n: int) -> float:  # mean us per call of the smallest shape, by CUDA events
        small = data[min(range(len(shapes)), key=lambda i: data[i][0].numel())]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn(problem.call_data(list(small)))
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000 / n

    before = launches(200)
    parts: dict = {}
    t = time.perf_counter()
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function
    parts["import"] = time.perf_counter() - t
    kernels = 0
    t_all = time.perf_counter()
    if mode == "per-shape":
        per = []
        for d in data:
            t0 = time.perf_counter()
            fn(problem.call_data(list(d)))
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    fn(problem.call_data(list(d)))
                    torch.cuda.synchronize()
            t1 = time.perf_counter()
            kernels += sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
            per.append([round(t1 - t0, 3), round(time.perf_counter() - t1, 3)])
        parts["per_shape_session_and_read_s"] = per
    else:
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            parts["enter"] = time.perf_counter() - t0
            for i, d in enumerate(data):
                fn(problem.call_data(list(d)))
                torch.cuda.synchronize()
                with record_function(f"kscience-shape-{i}"):
                    for _ in range(3):
                        fn(problem.call_data(list(d)))
                        torch.cuda.synchronize()
            t1 = time.perf_counter()
        parts["calls"] = t1 - t0 - parts["enter"]
        parts["leave"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        events = prof.events()
        ranges = [e.time_range for e in events if e.name.startswith("kscience-shape-")]
        gpu = [e for e in events if e.device_type == DeviceType.CUDA]
        inside = sum(1 for e in gpu if any(r.start <= e.time_range.start and e.time_range.end <= r.end for r in ranges))
        kernels = len(gpu)
        parts["read"] = time.perf_counter() - t2
        parts["kernels_inside_ranges"] = inside
    parts["total_s"] = time.perf_counter() - t_all
    after = launches(200)
    return {"problem": problem_name, "mode": mode, **warm, "shapes": len(shapes), "kernels": kernels,
            "parts": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in parts.items()},
            "launch_us_before_profiler": round(before, 2), "launch_us_after_profiler": round(after, 2)}


def _warm_facts() -> dict:
    """Does a warm-up session before the GPU is touched make a CUDA context (GPU memory this process
    holds, by nvidia-smi), and does a warm-up in a thread let the main thread run meanwhile (the GIL)?"""
    import os

    import torch
    from torch.profiler import ProfilerActivity, profile

    def smi() -> str:
        done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                              capture_output=True, text=True)
        return ";".join(line for line in done.stdout.splitlines() if line.split(",")[0].strip() == str(os.getpid()))

    facts = {"smi_before": smi()}
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        pass
    facts.update(warm_s=round(time.perf_counter() - t, 3), smi_after_warm=smi(),
                 torch_cuda_initialized=torch.cuda.is_initialized())
    return facts


def _thread_facts() -> dict:
    """A warm-up in a thread after the context exists: how far does the main thread get meanwhile?"""
    import threading

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.ones(1, device="cuda")
    torch.cuda.synchronize()

    def warm():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            pass

    th = threading.Thread(target=warm)
    t = time.perf_counter()
    th.start()
    ticks, longest, last = 0, 0.0, time.perf_counter()
    while th.is_alive():
        now = time.perf_counter()
        longest, last, ticks = max(longest, now - last), now, ticks + 1
    return {"thread_warm_s": round(time.perf_counter() - t, 3), "main_ticks": ticks,
            "main_longest_stall_s": round(longest, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="matmul,softmax", help="comma-separated; empty: only the warm-up facts")
    ap.add_argument("--modes", default="per-shape,one-session,per-shape,one-session")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        what = {"warm-facts": _warm_facts, "thread-facts": _thread_facts}.get(args.child[0])
        print(json.dumps(what() if what else _one(*args.child)))
        return
    import torch

    rows = []
    for what in ("warm-facts", "thread-facts", "thread-facts"):
        done = subprocess.run([sys.executable, __file__, "--child", what, "-"], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)
        row = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-300:]}
        rows.append(dict(row, what=what))
        print(what, row, flush=True)
    for name in filter(None, args.problems.split(",")):
        for mode in args.modes.split(","):
            t = time.perf_counter()
            done = subprocess.run([sys.executable, __file__, "--child", name, mode], capture_output=True, text=True,
                                  cwd=ROOT, timeout=300)
            if done.returncode:
                print(f"{name} {mode}: failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["process_s"] = round(time.perf_counter() - t, 2)
            rows.append(row)
            print(f"{name:8} {mode:12} {row.get('warm_s', '')} {row.get('context_after_warm', '')} shapes {row['shapes']} kernels {row['kernels']:4} "
                  f"profiling {row['parts']['total_s']:6.3f} s  {row['parts']}  launch us "
                  f"{row['launch_us_before_profiler']} -> {row['launch_us_after_profiler']}", flush=True)
    device = torch.cuda.get_device_name(0).replace(" ", "_")
    out = Path(args.out) / f"profiler-cost-{device}-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "profiler_cost", "device": torch.cuda.get_device_name(0),
                               "date": str(datetime.date.today()), "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
