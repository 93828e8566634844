"""Where do the seconds of "timing each launched kernel" go?

On an H100 (benchmarks/results/README.md, 2026-11-27) the `kernels` phase took 4-6.6 s of a 7-10 s
evaluation of a matmul, softmax or rmsnorm child: half of the slot's time went on advice to the
scientist. This times, in a fresh process per problem and mode as a worker is, one profiled pass over
every benchmark shape of the problem's seed (per shape: a warm-up call, then a session of 3 calls):

  torch-profiler   sessions of torch.profiler.profile, as the worker ran them until 2026-11-27
  kernel-times     the worker's own `kernel_times._cuda_launches` (torch.autograd.profiler)

Its answer on an H100 at dba0c30: the first torch.profiler session cost 3.7-6.2 s and every later one
milliseconds; one session for all shapes saved nothing; a warm-up session before the GPU is touched
cost as much, made a CUDA context (530 MiB) and, run in a thread beside a busy main thread, took 45 s.
The cost is Python: `torch.profiler.profile` imports torch._inductor on its first start. On an H200 at
e772673 the worker's pass took 0.04 s for four shapes against 3.9-4.6 s, with the same kernels. Per mode
it also times 200 calls of the smallest shape with CUDA events before and after profiling.

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
    import importlib.util
    import tempfile

    import torch

    from kscience.evaluate import kernel_times
    from kscience.problems import load_problem

    problem = load_problem(problem_name)
    path = Path(tempfile.mkdtemp()) / "seed.py"  # Triton reads a kernel's source from its file
    path.write_text(problem.seed_source)
    spec = importlib.util.spec_from_file_location("seed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, problem.entry)
    data = [problem.generate_input(1000 + i, "cuda", **s) for i, s in enumerate(problem.benchmarks)]

    def caller(d):
        def call():
            fn(problem.call_data(list(d)))
            torch.cuda.synchronize()
        return call

    for d in data:  # compiled and warm, as after the timed calls
        caller(d)()

    def launches(n: int) -> float:  # mean us per call of the smallest shape, by CUDA events
        small = min(data, key=lambda d: d[0].numel())
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn(problem.call_data(list(small)))
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000 / n

    def old(call, calls):
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                call()
        return {e.name: 1 for e in prof.events() if e.device_type == DeviceType.CUDA}

    profiled = {"torch-profiler": old, "kernel-times": kernel_times._cuda_launches}[mode]
    before = launches(200)
    per_shape, kernels = [], 0
    for d in data:
        t = time.perf_counter()
        caller(d)()
        kernels += len(profiled(caller(d), 3))
        per_shape.append(round(time.perf_counter() - t, 3))
    return {"problem": problem_name, "mode": mode, "shapes": len(data), "kernel_names": kernels,
            "seconds_per_shape": per_shape, "total_s": round(sum(per_shape), 3),
            "inductor_imported": "torch._inductor" in sys.modules,
            "launch_us_before": round(before, 2), "launch_us_after": round(launches(200), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="matmul,softmax")
    ap.add_argument("--modes", default="torch-profiler,kernel-times,torch-profiler,kernel-times")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_one(*args.child)))
        return
    import torch

    rows = []
    for name in args.problems.split(","):
        for mode in args.modes.split(","):
            done = subprocess.run([sys.executable, __file__, "--child", name, mode], capture_output=True, text=True,
                                  cwd=ROOT, timeout=300)
            if done.returncode:
                print(f"{name} {mode}: failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{name:8} {mode:15} {row['total_s']:6.3f} s {row['seconds_per_shape']} kernel names "
                  f"{row['kernel_names']:3} inductor {row['inductor_imported']!s:5} launch us "
                  f"{row['launch_us_before']} -> {row['launch_us_after']}", flush=True)
    device = torch.cuda.get_device_name(0)
    out = Path(args.out) / f"profiler-cost-{device.replace(' ', '_')}-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "profiler_cost", "device": device, "date": str(datetime.date.today()),
                               "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
