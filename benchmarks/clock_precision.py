"""How precise is the judge's own clock, and how much can a worker that forges its events gain?

The judge's estimate of a call (its brackets less what empty calls cost: docs/evaluation.md, "Where the
clock is") bounds the worker's CUDA events, which are the figure wherever they lie no lower than the
estimate less four of its standard errors, 5%, 2 us and a tenth of an empty call's cost
(`crosscheck.Estimate.low`). This measures, for calls of about 5 us, 50 us and 5 ms on this GPU, over
several evaluations each:

* the judge's estimate against the events (their ratio, and the estimate's standard error as a share
  of the call): how close the judge's clock comes, which sets how far the allowances can be narrowed;
* an honest call against the same call whose replies divide its times by 50 through the JSON encoder
  (the attack that passed at 0.02x on an H200 at 5fedbbb): what the forger still gains, as forged
  figure over honest figure (1.0: nothing; the target is at least 0.8);
* how often the judge's own estimate replaced the events of an honest call.

The calls are softmax on the problem's smallest benchmark shape followed by a GPU spin of a calibrated
number of cycles (`torch.cuda._sleep`). Under the CPU interpreter (`--quick`) the spins are host waits
of 1 and 10 ms and only the script's path is exercised. Results:
benchmarks/results/clock-precision-<device>-<date>.json.

    python benchmarks/clock_precision.py [--repeats 5]
    python benchmarks/clock_precision.py --quick
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import statistics
import subprocess
from pathlib import Path

import torch

from kscience.device import detect
from kscience.evaluate.judge.evaluation import evaluate, judging_process
from kscience.evaluate.result import EvalRequest
from kscience.problems import load_problem

TARGETS_US = (5.0, 50.0, 5000.0)  # on a GPU
QUICK_TARGETS_US = (1000.0, 10000.0)  # under the interpreter
FORGE = (Path(__file__).parents[1] / "tests" / "data" / "json_forgery.py").read_text()  # replies / 50


def cycles_per_us() -> float:
    """What `torch.cuda._sleep` spins per microsecond on this GPU now, by CUDA events."""
    torch.cuda._sleep(1_000_000)  # the clock up from idle
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    torch.cuda.synchronize()
    return 10_000_000 / (start.elapsed_time(end) * 1e3)


def source(target_us: float, on_gpu: bool, rate: float) -> str:
    wait = (f"    torch.cuda._sleep({int(target_us * rate)})\n" if on_gpu else
            f"    _t = time.perf_counter()\n    while time.perf_counter() - _t < {target_us / 1e6}:\n        pass\n")
    return ("import time\nimport torch\n\n\ndef custom_kernel(data):\n"
            "    x = data[0].float()\n    e = (x - x.amax(-1, keepdim=True)).exp()\n"  # softmax forbids torch.softmax
            "    y = (e / e.sum(-1, keepdim=True)).to(torch.bfloat16)\n" + wait + "    return y\n")


def judged(src: str, problem, gpu) -> dict:
    r = evaluate(EvalRequest(problem="softmax", source=src, shapes="benchmarks"), gpu=gpu, problem=problem,
                 keep_spare=True)
    s = next((s for s in r.shapes if s.phase == "benchmark"), None)
    return {"status": r.status, "message": r.message, "time_us": s.time_us if s else None,
            "judge_us": s.judge_us if s else None, "judge_se_us": s.judge_se_us if s else None,
            "clock": s.clock if s else "", "n": s.n if s else 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="evaluations per call length and kind (default 5)")
    ap.add_argument("--quick", action="store_true", help="the CPU interpreter: two lengths, two repeats")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    device = detect()
    on_gpu = not device.interpreted
    if not on_gpu and not args.quick:
        raise SystemExit("clock_precision: no GPU here; --quick exercises the script under the CPU interpreter")
    judging_process()
    gpu = 0 if on_gpu else None
    targets = TARGETS_US if on_gpu else QUICK_TARGETS_US
    repeats = 2 if args.quick else args.repeats
    rate = cycles_per_us() if on_gpu else 0.0
    problem = load_problem("softmax")
    smallest = min(problem.shapes("benchmarks", not on_gpu), key=lambda sh: sh["m"] * sh["n"])
    problem = dataclasses.replace(problem, benchmarks=[smallest], cpu_benchmarks=[smallest])
    rows = []
    for target in targets:
        honest = [judged(source(target, on_gpu, rate), problem, gpu) for _ in range(repeats)]
        forged = [judged(FORGE + source(target, on_gpu, rate), problem, gpu) for _ in range(repeats)]
        ok = [h for h in honest if h["status"] == "ok" and h["time_us"] and h["judge_us"]]
        fo = [f for f in forged if f["status"] == "ok" and f["time_us"]]
        honest_us = statistics.median(h["time_us"] for h in ok) if ok else None
        rows.append({
            "target_us": target, "honest": honest, "forged": forged,
            "honest_median_us": honest_us,
            "judge_over_events": [round(h["judge_us"] / h["time_us"], 4) for h in ok],
            "se_share": [round(h["judge_se_us"] / h["time_us"], 4) for h in ok if h["judge_se_us"]],
            "honest_timed_by_the_judge": sum(h["clock"] != "cuda events" for h in ok),
            "forged_over_honest": [round(f["time_us"] / honest_us, 4) for f in fo] if honest_us else [],
            "not_ok": [x for x in honest + forged if x["status"] != "ok"],
        })
    print(f"\n{device.name}: the judge's clock against the worker's events, {repeats} evaluations each")
    print(f"{'call':>9s} {'honest us':>10s} {'judge/events':>14s} {'se/call':>9s} {'judged':>7s} {'forged/honest':>14s}")
    for r in rows:
        med = (lambda v: f"{statistics.median(v):.3f}" if v else "-")
        print(f"{r['target_us']:9.0f} {r['honest_median_us'] or float('nan'):10.1f} {med(r['judge_over_events']):>14s} "
              f"{med(r['se_share']):>9s} {r['honest_timed_by_the_judge']:7d} {med(r['forged_over_honest']):>14s}")
    stamp = datetime.date.today().isoformat()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", device.name).strip("_")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = Path(args.out) / f"clock-precision-{name}-{stamp}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device.name, "date": stamp, "commit": commit, "torch": torch.__version__,
                               "cycles_per_us": rate, "repeats": repeats, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
