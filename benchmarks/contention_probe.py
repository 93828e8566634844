"""What a synchronised region waits for on a GPU shared with busy processes, by what it holds.

Why the worker's host clock starts when the GPU reaches a call (harness.reached) rather than at
submission, and why no region of the judge's own can stand in for a worker's wait. This measures,
beside a matrix-product neighbour and K processes that loop the worker's null call (flush, spin,
two events), the host-minus-GPU gap, with the host clock started at submission, of:
  events     two events alone
  tiny       two events around a one-element kernel
  null-call  the worker's null call (timing.Timer.timed_call with nothing to run)
  spin       a spin before the start event, no flush
and of the null call with the host clock started when the GPU reached it (`reached`, as the
worker times every call now), and what the looping processes themselves saw. Prints a table and writes
benchmarks/results/contention-probe-<device>-<date>.json.

    python benchmarks/contention_probe.py [--loopers 0,3] [--samples 60]
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import statistics
import time
from pathlib import Path

import torch

from kscience.device import detect
from kscience.evaluate import contexts
from kscience.evaluate.harness import COVER_CYCLES, flush_bytes, reached

from false_rejections import busy_neighbour  # this folder is on the path of a script run from it


def region_gap_us(kind: str, flush: torch.Tensor, scratch: torch.Tensor) -> float:
    """Host time minus GPU time of one region of `kind` (a name of KINDS)."""
    before, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    h0 = time.perf_counter()
    before.record()
    if kind.startswith("null-call"):
        flush.zero_()
    if kind.startswith("null-call") or kind == "spin":
        torch.cuda._sleep(COVER_CYCLES)
    if kind == "null-call-reached":
        h0 = reached(before, h0)
    start.record()
    if kind == "tiny":
        scratch.zero_()
    end.record()
    torch.cuda.synchronize()
    return (time.perf_counter() - h0) * 1e6 - before.elapsed_time(end) * 1e3


KINDS = ("events", "tiny", "null-call", "spin", "null-call-reached")


def _looper(stop, seen) -> None:
    """A worker between its timed calls: null calls back to back, a little host work between."""
    flush = torch.empty(flush_bytes(detect().l2_bytes) // 4, device="cuda")
    scratch = torch.empty(1, device="cuda")
    gaps = []
    while not stop.is_set():
        gaps.append(region_gap_us("null-call", flush, scratch))
        time.sleep(0.0005)
    seen.put(statistics.median(gaps) if gaps else float("nan"))


def measure(samples: int) -> dict:
    flush = torch.empty(flush_bytes(detect().l2_bytes) // 4, device="cuda")
    scratch = torch.empty(1, device="cuda")
    out = {}
    for kind in KINDS:
        gaps = sorted(region_gap_us(kind, flush, scratch) for _ in range(samples))
        out[kind] = {"median": gaps[len(gaps) // 2], "q75": gaps[3 * len(gaps) // 4], "min": gaps[0], "max": gaps[-1]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loopers", default="0,3", help="numbers of null-call loopers to try (default 0,3)")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("contention_probe.py needs a CUDA GPU: it measures waits for other processes' time slices")
    ctx = mp.get_context("spawn")
    rows = []
    for k in [int(x) for x in args.loopers.split(",")]:
        stop, seen = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=busy_neighbour, args=([0], stop))] + [ctx.Process(target=_looper, args=(stop, seen))
                                                                   for _ in range(k)]
        for p in procs:
            p.start()
        try:
            time.sleep(8.0)  # every process has its context and is looping
            row = {"loopers": k, "here": measure(args.samples),
                   # the driver's count of contexts on the GPU, and those the judge would call others':
                   # this process's own is not among them; the neighbour's and every looper's are
                   "contexts_listed": contexts.listed(0), "others": contexts.others(0, set())}
            stop.set()
            row["loopers_saw_median"] = [seen.get(timeout=30) for _ in range(k)]
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.terminate()
        rows.append(row)
        print(f"neighbour + {k} looper(s): loopers' own null-call gap (median) "
              + ", ".join(f"{x:.0f}" for x in row["loopers_saw_median"])
              + f"; contexts listed {row['contexts_listed']}, others than this process {row['others']}"
              f" (expected {k + 2} and {k + 1})")
        print(f"  {'region':18} {'median us':>10} {'q75 us':>10} {'min':>8} {'max':>8}")
        for kind, v in row["here"].items():
            print(f"  {kind:18} {v['median']:10.0f} {v['q75']:10.0f} {v['min']:8.0f} {v['max']:8.0f}")
    name = torch.cuda.get_device_name()
    result = {"device": name, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "samples": args.samples, "rows": rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"contention-probe-{name.replace(' ', '_')}-{result['date']}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
