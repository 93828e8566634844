"""Is pmpp sort's slow state a property of the process? Fresh processes time the published solution outside the judge.

The judge rejects GPU MODE's pmpp sort `submission.py` (torch.sort under torch.compile's reduce-overhead) as
side work in some evaluations and not others, with the same code; in the rejected ones the small shapes'
event times and the time outside the events both rise by a fixed cost per call, while the null calls look
the same. This starts --processes fresh interpreters one after another, each set up as a worker is (spinning
synchronisation, the same cover before every region, inputs copied into fixed buffers, the previous output
poisoned, a copy of each output taken), and times in each, per benchmark shape and round: the published
solution, eager `torch.sort` and an empty region, each the way clocks.covered_region timed a region before
it gained its lead spin (no spin before the first event, torch.cuda.synchronize's wrapper), split below;
the published solution again behind a cover whose spin is ten times as long (`published_long_cover`); and
the published solution and an empty region timed by today's `clocks.covered_region` (`published_clocks`,
`null_clocks`: event and outside only). The first four are split by the host's clock:

  launch    host time of the call itself (from start.record() to its return)
  event     the CUDA events around it
  outside   host time minus event time
  seen      when the host saw the end event complete, against when the GPU's timestamp put it
  sync      torch.cuda.synchronize() after that (work still running anywhere on the device)
  cover     the cache flush and spin before the start event, by their events (the spin's cycles are
            fixed, so a long cover means a low SM clock)
  sm_mhz    the SM clock NVML reports just after the region

for the compiled call also the host time before its CUDA graph's replay and after it (`before_replay`,
`after_replay`), and the process's own facts: the CPUs it ran on and their NUMA nodes, context switches,
torch.compile's counters. Whether slow processes are slow in every region (the host), only in the
compiled one (its call path), in `sync` (device work outside the stream) or in `seen` is then in the table.

    python benchmarks/probes/sort_states.py [--processes 8] [--task DIR] [--rounds 10] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "data" / "gpumode" / "reference-kernels" / "pmpp" / "sort_py"
SIZES = (100_000, 500_000, 1_000_000, 10_000_000)  # the benchmark shapes less 100M (its build takes seconds)
REGIONS = ("published", "eager", "null", "published_long_cover", "published_clocks", "null_clocks")
LONG_COVER = 10  # times the cover's spin in the last region: whether a GPU kept busy longer runs the call faster


def sm_clock():
    """A function returning the GPU's current SM clock in MHz through NVML (nan where NVML cannot say)."""
    import ctypes

    import torch

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        nvml.nvmlInit_v2()
        handle, props = ctypes.c_void_p(), torch.cuda.get_device_properties(0)
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0".encode()
        if nvml.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(handle)) != 0:
            return lambda: math.nan
    except (OSError, AttributeError):
        return lambda: math.nan
    mhz = ctypes.c_uint()

    def read() -> float:
        return float(mhz.value) if nvml.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(mhz)) == 0 else math.nan
    return read


def current_cpu() -> int:
    """The CPU this process last ran on (field 39 of /proc/self/stat)."""
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])


def numa_node(cpu: int) -> int:
    nodes = [p.name for p in Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node*")]
    return int(nodes[0][4:]) if nodes else -1


def child(task: str, rounds: int, seed: int) -> dict:
    """One fresh process: set up as a worker, warm up, time the regions. Returns its figures."""
    import gc
    import random
    import resource
    import time

    from kscience.evaluate import clocks

    clocks.spin_while_waiting(False)
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")
    clocks.spin_while_waiting(True)
    sys.path[:0] = [task, str(Path(task).parent)]  # a GPU MODE task imports utils.py from its parent folder
    os.chdir(task)
    from reference import generate_input
    from submission import custom_kernel

    pc = time.perf_counter
    replays: list[float] = []  # host clock before and after each CUDA-graph replay of the current region
    replay = torch.cuda.CUDAGraph.replay

    def timed_replay(graph):
        replays.append(pc())
        replay(graph)
        replays.append(pc())

    torch.cuda.CUDAGraph.replay = timed_replay
    cpus = {current_cpu()}
    flush = torch.empty(clocks.flush_bytes(torch.cuda.get_device_properties(0).L2_cache_size) // 4,
                        dtype=torch.int32, device="cuda")
    order = list(SIZES)
    random.Random(seed).shuffle(order)
    calls = {"published": custom_kernel, "eager": lambda x: torch.sort(x)[0], "null": None,
             "published_long_cover": custom_kernel, "published_clocks": custom_kernel, "null_clocks": None}
    clock = sm_clock()
    shapes, t0 = {}, pc()
    for size in order:
        work = generate_input(size=size, seed=seed + size)
        sets = [work.clone(), generate_input(size=size, seed=seed + size + 1)]
        for w in range(3):
            work.copy_(sets[w % 2])
            out = custom_kernel(work)
            torch.cuda.synchronize()
            out.fill_(float("nan"))
        shapes[size] = (work, sets)
    warm_s = pc() - t0
    gc.freeze()
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    rows = {r: {s: [] for s in order} for r in REGIONS}
    for size in order:
        work, sets = shapes[size]
        for i in range(rounds):
            for region in REGIONS:
                work.copy_(sets[i % 2])
                flush.zero_()
                torch.cuda.synchronize()
                if region.endswith("_clocks"):
                    fn = calls[region]
                    event, host, out = clocks.covered_region(flush, (lambda: fn(work)) if fn else (lambda: None))
                    if out is not None:
                        out.clone()
                        out.fill_(float("nan"))
                    rows[region][size].append({"event": event, "outside": host - event})
                    continue
                before, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                h0 = pc()
                before.record()
                flush.zero_()
                torch.cuda._sleep(clocks.COVER_CYCLES * (LONG_COVER if region == "published_long_cover" else 1))
                h0 = clocks.reached(before, h0)
                start.record()
                replays.clear()
                l0 = pc()
                out = calls[region](work) if calls[region] else None
                l1 = pc()
                end.record()
                while not end.query():  # polled: the host clock reads the moment it learns the end ran
                    pass
                seen = pc()
                torch.cuda.synchronize()
                done = pc()
                cover_us = before.elapsed_time(start) * 1e3
                event = start.elapsed_time(end) * 1e3
                host = (done - h0) * 1e6 - cover_us
                end_by_gpu = h0 + (cover_us + event) * 1e-6  # when the end event ran, on the host's clock
                if out is not None:  # as the worker does: a copy for the judge, the output poisoned
                    out.clone()
                    out.fill_(float("nan"))
                cpus.add(current_cpu())
                row = {"launch": (l1 - l0) * 1e6, "event": event, "outside": host - event,
                       "seen": (seen - end_by_gpu) * 1e6, "sync": (done - seen) * 1e6, "cover": cover_us,
                       "sm_mhz": clock()}
                if replays:  # where the compiled call's host time goes: before the graph's launch, and after it
                    row |= {"before_replay": (replays[0] - l0) * 1e6, "after_replay": (l1 - replays[-1]) * 1e6}
                rows[region][size].append(row)
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    from torch._dynamo.utils import counters

    median = {r: {str(s): {k: statistics.median(c.get(k, math.nan) for c in rows[r][s]) for k in rows[r][s][0]}
                  for s in order} for r in REGIONS}
    return {"order": order, "warm_s": warm_s, "cpus": sorted(cpus), "nodes": sorted({numa_node(c) for c in cpus}),
            "voluntary_switches": usage1.ru_nvcsw - usage0.ru_nvcsw,
            "involuntary_switches": usage1.ru_nivcsw - usage0.ru_nivcsw,
            "counters": {k: dict(v) for k, v in counters.items() if k in ("stats", "inductor", "recompiles")},
            "median": median}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--task", default=str(TASK))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print("RESULT " + json.dumps(child(str(Path(args.task).resolve()), args.rounds, args.child)), flush=True)
        return
    import torch

    env = dict(os.environ, PYTHONPATH=str(ROOT), TORCHINDUCTOR_COMPILE_THREADS="1")
    processes = []
    for p in range(args.processes):
        seed = int.from_bytes(os.urandom(3), "little")
        done = subprocess.run([sys.executable, __file__, "--child", str(seed), "--task", args.task,
                               "--rounds", str(args.rounds)], env=env, capture_output=True, text=True, timeout=300)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            print(f"process {p + 1}: failed (rc {done.returncode}): {done.stderr.strip()[-600:]}", flush=True)
            if not processes:
                break  # the first one failed: the others would fail the same way
            continue
        r = json.loads(lines[0][7:])
        processes.append(r)
        print(f"process {p + 1}: order {r['order']}, warm-up {r['warm_s']:.1f} s, cpus {r['cpus']} nodes {r['nodes']}, "
              f"switches {r['voluntary_switches']}/{r['involuntary_switches']}, counters {r['counters']}", flush=True)
        for region in REGIONS:
            for size, m in r["median"][region].items():
                print(f"    {region:>9} {int(size):>9}  " + "  ".join(f"{k} {v:8.1f}" for k, v in m.items()), flush=True)
    name = torch.cuda.get_device_name(0).replace(" ", "_")
    out = Path(args.out) / f"sort-states-{name}-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"probe": "sort_states", "device": name, "date": str(datetime.date.today()),
                               "task": args.task, "torch": torch.__version__, "processes": processes}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
