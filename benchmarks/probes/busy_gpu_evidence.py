"""Can the judge tell, from its own CUDA context, that a worker's GPU work still ran when the worker replied?

A worker whose synchronisation was switched off returns from a timed call while its work still runs on the
GPU (docs/evaluation.md, "Residual risks"): the work lands in whatever waits for the GPU next, the worker's
copies of outputs for the judge's reads included, which are not timed. Two kinds of evidence would come from
outside the worker, and this probe measures both:

  read    the judge reads the output itself through CUDA IPC right after the reply: work still queued ahead
          of the output's last write reads as the NaN the output was filled with
  probe   the judge launches a tiny kernel of its own right after the reply and waits for it: while another
          context still has work, the GPU runs the judge's context only in its turn

A worker process shares one output tensor with this process (torch.multiprocessing sends CUDA tensors as IPC
handles) and, per round, fills it with NaN, queues a backlog of matrix products, then writes the round's
value into it. In `honest` rounds it synchronises before replying, in `unwaited` rounds it does not. Read
rounds and probe rounds alternate; after each, the worker synchronises, so no round inherits another's work.
Per backlog length and mode it prints how often the judge's read saw the round's value, the read's latency,
and the probe's latency (median and p99), and writes them with the device and date.

    python benchmarks/probes/busy_gpu_evidence.py [--backlogs-ms 0,0.1,0.5,2,10] [--rounds 40] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

SIZE = 2048  # the backlog's matrix products: [SIZE, SIZE] @ [SIZE, SIZE] in bf16, tens of microseconds each


def worker(conn) -> None:
    """Shares its output, then serves rounds: ("round", value, n_products, honest) and ("settle",)."""
    torch.cuda.init()
    out = torch.empty(1 << 20, device="cuda")  # [1M] fp32: the output the judge reads
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        torch.matmul(a, b, out=c)
    start.record()
    for _ in range(50):
        torch.matmul(a, b, out=c)
    end.record()
    torch.cuda.synchronize()
    conn.send((out, start.elapsed_time(end) * 1000 / 50))  # the tensor travels as a CUDA IPC handle
    while True:
        cmd = conn.recv()
        if cmd[0] == "stop":
            return
        if cmd[0] == "settle":
            torch.cuda.synchronize()
            conn.send("settled")
            continue
        _, value, n, honest = cmd
        out.fill_(math.nan)
        for _ in range(n):
            torch.matmul(a, b, out=c)
        out.fill_(value)
        if honest:
            torch.cuda.synchronize()
        conn.send("done")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else math.nan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backlogs-ms", default="0,0.1,0.5,2,10", help="work queued after the reply, in milliseconds")
    ap.add_argument("--rounds", type=int, default=40, help="rounds per backlog and mode (half read, half probe)")
    ap.add_argument("--out", default=str(Path(__file__).parents[1] / "results"))
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=worker, args=(there,), daemon=True)
    proc.start()
    shared, product_us = here.recv()
    mine = torch.zeros(1, device="cuda")  # the judge's own tiny kernel writes this
    torch.cuda.synchronize()
    rows = []
    print(f"{torch.cuda.get_device_name()}: one [{SIZE}]^2 bf16 product takes {product_us:.1f} us in the worker")
    print(f"{'backlog ms':>10} {'mode':<9} {'saw value':>9} {'read us p50':>12} {'read us p99':>12} "
          f"{'probe us p50':>13} {'probe us p99':>13}")
    value = 0.0
    for backlog_ms in (float(x) for x in args.backlogs_ms.split(",")):
        n = round(backlog_ms * 1000 / product_us)
        for honest in (True, False):
            seen, reads, probes = [], [], []
            for r in range(args.rounds):
                value += 1.0
                here.send(("round", value, n, honest))
                here.recv()
                t0 = time.perf_counter()
                if r % 2 == 0:  # the judge's own read of the output, in its own context
                    got = shared[0].item()
                    reads.append((time.perf_counter() - t0) * 1e6)
                    seen.append(got == value)
                else:  # a kernel of the judge's own, waited for
                    mine.add_(1.0)
                    torch.cuda.synchronize()
                    probes.append((time.perf_counter() - t0) * 1e6)
                here.send(("settle",))
                here.recv()
            row = {"backlog_ms": backlog_ms, "products": n, "mode": "honest" if honest else "unwaited",
                   "saw_value": sum(seen) / len(seen) if seen else None,
                   "read_us_p50": statistics.median(reads), "read_us_p99": pct(reads, 0.99),
                   "probe_us_p50": statistics.median(probes), "probe_us_p99": pct(probes, 0.99)}
            rows.append(row)
            print(f"{backlog_ms:>10g} {row['mode']:<9} {row['saw_value']:>9.0%} {row['read_us_p50']:>12.1f} "
                  f"{row['read_us_p99']:>12.1f} {row['probe_us_p50']:>13.1f} {row['probe_us_p99']:>13.1f}", flush=True)
    here.send(("stop",))
    proc.join(10)
    device = torch.cuda.get_device_name().replace(" ", "_")
    stamp = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"busy-gpu-evidence-{device}-{stamp}.json"
    path.write_text(json.dumps({"device": torch.cuda.get_device_name(), "date": stamp, "torch": torch.__version__,
                                "product_us": product_us, "rows": rows}, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
