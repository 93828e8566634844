"""Where do the judge's own clock and the worker's CUDA events disagree on honest kernels?

For each honest kernel (the built-in softmax seed, a two-launch softmax that prints a line per call, the
same without the print, and one that keeps its scratch between calls), every benchmark shape of softmax
is judged once, and each round's brackets are summarised as the judge saw them: the median timed bracket,
the median null bracket (this round's and the pristine worker's), the worker's median host time and its
median CUDA events, and the figure recorded with its clock. Where the judge's estimate exceeds the events
by far, the bracket holds work the events do not: the columns say whether it is in the candidate's call
(host time) or around it (bracket less host time). Results: benchmarks/results/clock-agreement-<device>-<date>.json.

    python benchmarks/clock_agreement.py
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
import subprocess
from pathlib import Path

import torch

from kscience.device import detect
from kscience.evaluate.judge import crosscheck, measure
from kscience.evaluate.judge.evaluation import evaluate, judging_process
from kscience.evaluate.result import EvalRequest
from kscience.problems import load_problem

TWO = (Path(__file__).parents[1] / "tests" / "data" / "two_launch_softmax.py").read_text()
KERNELS = {
    "seed": None,
    "two launches, printing": TWO,
    "two launches": TWO.replace('    print("TMA unavailable, falling back to pointer loads", file=sys.stderr)\n', ""),
    "two launches, kept scratch": TWO.replace(
        "    m = torch.empty(M, device=x.device, dtype=torch.float32)\n    y = torch.empty_like(x)\n",
        "    m, y = _scratch(x)\n") + (
        "\n\n_kept = {}\n\n\ndef _scratch(x):\n    if x.shape not in _kept:\n"
        "        _kept[x.shape] = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)\n"
        "    return _kept[x.shape], torch.empty_like(x)\n"),
}
_rounds: list[dict] = []


def _watched_estimate(calls, pristine, shared=False):
    est = _estimate(calls, pristine, shared)
    med = lambda xs: round(statistics.median(xs), 2) if xs else None  # noqa: E731
    timed, nulls = [c for c in calls if c.kind == "timed"], [c for c in calls if c.kind == "null"]
    _rounds.append({"timed_bracket_us": med([c.window_us for c in timed]), "null_bracket_us": med([c.window_us for c in nulls]),
                    "pristine_us": round(pristine.median_us, 2) if pristine.n else None,
                    "host_us": med([c.host_us for c in timed]), "events_us": med([c.event_us for c in timed]),
                    "null_host_us": med([c.host_us for c in nulls]), "estimate_us": round(est.us, 2),
                    "se_us": round(est.se_us, 2), "low_us": round(est.low(), 2), "shared": shared})
    return est


_estimate = crosscheck.estimate
measure.crosscheck.estimate = _watched_estimate


def main() -> None:
    device = detect()
    if device.interpreted:
        raise SystemExit("clock_agreement: needs a GPU")
    judging_process()
    problem = load_problem("softmax")
    rows = []
    for name, src in KERNELS.items():
        _rounds.clear()
        r = evaluate(EvalRequest(problem="softmax", source=src or problem.seed_source, shapes="benchmarks"),
                     gpu=0, problem=problem, keep_spare=True)
        shapes = [s for s in r.shapes if s.phase == "benchmark"]
        rows.append({"kernel": name, "status": r.status, "message": r.message, "rounds": list(_rounds),
                     "shapes": [{"shape": s.shape, "time_us": s.time_us, "clock": s.clock, "judge_us": s.judge_us,
                                 "message": s.message} for s in shapes]})
        print(f"\n{name}: {r.status} {r.message[:160]}")
        print(f"  {'timed':>9s} {'null':>8s} {'pristine':>8s} {'host':>9s} {'events':>9s} {'null host':>9s} "
              f"{'estimate':>9s} {'low':>9s}")
        for x in _rounds:
            print("  " + " ".join(f"{x[k] if x[k] is not None else float('nan'):9.1f}" for k in
                                  ("timed_bracket_us", "null_bracket_us", "pristine_us", "host_us", "events_us",
                                   "null_host_us", "estimate_us", "low_us")))
        for s in shapes:
            print(f"  {s.shape}: {s.time_us:,.1f} us by {s.clock}" + (f" ({s.message[:140]})" if s.message else ""))
    stamp = datetime.date.today().isoformat()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", device.name).strip("_")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = Path(__file__).parent / "results" / f"clock-agreement-{name}-{stamp}.json"
    out.write_text(json.dumps({"device": device.name, "date": stamp, "commit": commit, "torch": torch.__version__,
                               "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
