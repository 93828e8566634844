"""What a synchronised region waits for on a GPU shared with busy processes, by what it holds.

Why the worker's host clock starts when the GPU reaches a call (clocks.reached) rather than at
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

    python benchmarks/probes/contention_probe.py [--loopers 0,3] [--samples 60]
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import torch

from kscience.device import detect
from kscience.evaluate.clocks import COVER_CYCLES, flush_bytes, reached
from kscience.evaluate.judge import contexts

sys.path.insert(0, str(Path(__file__).parents[1]))  # benchmarks/, for false_rejections
from false_rejections import busy_neighbour  # noqa: E402


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


PATTERNS = ("enqueue-all", "reached-first", "reached-after")


def pattern_call(pattern: str, flush: torch.Tensor, launch_us: float = 50.0, cycles: int = 200_000):
    """(wall us, host minus event us, event us) of one timed call queued as `pattern`: everything
    queued before any look (enqueue-all, host clock from submission), the host waiting for the GPU
    to reach the call before it launches the kernel (reached-first), or looking once everything is
    queued (reached-after). `launch_us` of host work stands for a Python launch; the kernel spins
    `cycles` (about 100 us)."""
    before, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    t0 = h0 = time.perf_counter()
    before.record()
    flush.zero_()
    torch.cuda._sleep(COVER_CYCLES)
    if pattern == "reached-first":
        h0 = reached(before, h0)
    start.record()
    while (time.perf_counter() - t0) * 1e6 < launch_us:  # the host busy, as a Python launch keeps it
        continue
    torch.cuda._sleep(cycles)
    end.record()
    if pattern == "reached-after":
        h0 = reached(before, h0)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    event = start.elapsed_time(end) * 1e3
    return (t1 - t0) * 1e6, (t1 - h0) * 1e6 - before.elapsed_time(start) * 1e3 - event, event


def _pattern_looper(pattern: str, stop, seen) -> None:
    """Another worker timing calls the same way, a little host work between them."""
    flush = torch.empty(flush_bytes(detect().l2_bytes) // 4, device="cuda")
    walls = []
    while not stop.is_set():
        walls.append(pattern_call(pattern, flush)[0])
        time.sleep(0.0005)
    seen.put(statistics.median(walls) if walls else float("nan"))


def patterns(samples: int, loopers: int) -> list[dict]:
    """Each pattern beside the neighbour and `loopers` processes that time calls the same way."""
    ctx, rows = mp.get_context("spawn"), []
    for pattern in PATTERNS:
        stop, seen = ctx.Event(), ctx.Queue()

        def timed() -> tuple[list, list]:
            flush = torch.empty(flush_bytes(detect().l2_bytes) // 4, device="cuda")
            got = [pattern_call(pattern, flush) for _ in range(samples)]
            stop.set()
            return got, [seen.get(timeout=30) for _ in range(loopers)]

        got, others = _beside([ctx.Process(target=_pattern_looper, args=(pattern, stop, seen))
                               for _ in range(loopers)], ctx, stop, timed)
        wall, outside = sorted(g[0] for g in got), sorted(g[1] for g in got)
        rows.append({"pattern": pattern, "loopers": loopers, "wall_median_us": wall[len(wall) // 2],
                     "outside_median_us": outside[len(outside) // 2], "outside_p90_us": outside[9 * len(outside) // 10],
                     "event_median_us": statistics.median(g[2] for g in got), "loopers_wall_median_us": others})
        r = rows[-1]
        print(f"  {pattern:14} wall {r['wall_median_us']:8.0f} us  outside {r['outside_median_us']:7.0f} "
              f"(p90 {r['outside_p90_us']:7.0f})  event {r['event_median_us']:6.0f}  loopers' wall "
              + ", ".join(f"{x:.0f}" for x in others))
    return rows


def _beside(procs: list, ctx, stop, work):
    """`work()` once a busy neighbour and `procs` have their contexts and are looping; all stopped after."""
    procs = [ctx.Process(target=busy_neighbour, args=([0], stop))] + procs
    for p in procs:
        p.start()
    try:
        time.sleep(8.0)
        return work()
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()


def _write(out: Path, stem: str, samples: int, rows: list) -> None:
    name = torch.cuda.get_device_name()
    result = {"device": name, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
              "samples": samples, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}-{name.replace(' ', '_')}-{result['date']}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


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
    ap.add_argument("--patterns", type=int, metavar="K", default=None,
                    help="instead: time a 100 us call queued each way of PATTERNS beside the neighbour and K "
                         "processes doing the same, and write contention-patterns-<device>-<date>.json")
    ap.add_argument("--out", default=str(Path(__file__).parents[1] / "results"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("contention_probe.py needs a CUDA GPU: it measures waits for other processes' time slices")
    if args.patterns is not None:
        _write(Path(args.out), "contention-patterns", args.samples, patterns(args.samples, args.patterns))
        return
    ctx = mp.get_context("spawn")
    rows = []
    for k in [int(x) for x in args.loopers.split(",")]:
        stop, seen = ctx.Event(), ctx.Queue()

        def regions() -> dict:
            row = {"loopers": k, "here": measure(args.samples),
                   # the driver's count of contexts on the GPU, and those the judge would call others':
                   # this process's own is not among them; the neighbour's and every looper's are
                   "contexts_listed": contexts.listed(0), "others": contexts.others(0, set())}
            stop.set()
            row["loopers_saw_median"] = [seen.get(timeout=30) for _ in range(k)]
            return row

        row = _beside([ctx.Process(target=_looper, args=(stop, seen)) for _ in range(k)], ctx, stop, regions)
        rows.append(row)
        print(f"neighbour + {k} looper(s): loopers' own null-call gap (median) "
              + ", ".join(f"{x:.0f}" for x in row["loopers_saw_median"])
              + f"; contexts listed {row['contexts_listed']}, others than this process {row['others']}"
              f" (expected {k + 2} and {k + 1})")
        print(f"  {'region':18} {'median us':>10} {'q75 us':>10} {'min':>8} {'max':>8}")
        for kind, v in row["here"].items():
            print(f"  {kind:18} {v['median']:10.0f} {v['q75']:10.0f} {v['min']:8.0f} {v['max']:8.0f}")
    _write(Path(args.out), "contention-probe", args.samples, rows)


if __name__ == "__main__":
    main()
