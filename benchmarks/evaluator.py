"""How far can kscience's timings be trusted, and how fast is one evaluation?

For every built-in problem's seed kernel this prints, per benchmark shape, kscience's
median time against `triton.testing.do_bench` on the same kernel and inputs (the ratio),
the spread of kscience's geomean over repeated evaluations, and the wall seconds one
evaluation takes as in a search: every shape checked, a warm Triton cache, and the next
evaluation's spare worker starting beside it. Targets: spread <= 1%, ratio 0.97-1.03,
fp8_blockscale_gemm (29 shapes) <= 4 s on an H100. Results go to
benchmarks/results/evaluator-<device>-<date>.json.

    python benchmarks/evaluator.py [--problems softmax,matmul] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import triton

from kscience.device import detect
from kscience.evaluate.judge.evaluation import evaluate, judging_process
from kscience.evaluate.result import EvalRequest
from kscience.problems import builtin_names, load_problem, shape_label


def do_bench_times(problem, source: str) -> dict[str, float]:
    """Median microseconds per benchmark shape from Triton's own benchmark helper."""
    import triton.testing

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)  # Triton reads kernel source from a real file
    spec = importlib.util.spec_from_file_location("seed_under_bench", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    times = {}
    for shape in problem.benchmarks:
        data = problem.generate_input(1234, "cuda", **shape)
        times[shape_label(shape)] = triton.testing.do_bench(lambda: module.custom_kernel(data), return_mode="median") * 1e3
    return times


def bench_problem(name: str, repeats: int, spare: bool = True) -> dict:
    problem = load_problem(name)
    # Every shape, as a search evaluates a candidate. The first evaluation also warms the Triton cache.
    request = EvalRequest(problem=name, source=problem.seed_source, shapes="all")
    first = evaluate(request, keep_spare=spare)
    # As in a search: each evaluation's worker was started, and imported torch, during the one before.
    runs = [evaluate(request, keep_spare=spare) for _ in range(repeats)]
    # Every verdict is kept: a rejection of the honest seed is a false rejection, and where it
    # happened (shape, message, how near the other calls came) is what explains it.
    verdicts = [{"status": r.status, "message": r.message[:400], "failing_shape": r.failing_shape,
                 "wall_s": r.wall_s, "clocks": _clocks(r)} for r in [first] + runs]
    runs = [r for r in runs if r.ok]  # the figures below come from the ok ones; the count of the rest is kept
    if not runs:
        return {"problem": name, "status": verdicts[-1]["status"], "message": verdicts[-1]["message"],
                "verdicts": verdicts}
    geomeans = [r.geomean_us for r in runs]
    reference = do_bench_times(problem, problem.seed_source)
    shapes = []
    timed = [[s for s in r.shapes if s.time_us] for r in runs]  # the benchmark shapes, in order
    for i, shape in enumerate(problem.benchmarks):
        ks = statistics.median(t[i].time_us for t in timed)
        shapes.append({"shape": shape_label(shape), "kscience_us": ks, "do_bench_us": reference[shape_label(shape)],
                       "ratio": ks / reference[shape_label(shape)], "floor_us": timed[0][i].floor_us,
                       "n": timed[0][i].n})
    return {"problem": name, "status": "ok", "not_ok": sum(v["status"] != "ok" for v in verdicts),
            "geomeans_us": geomeans,
            "spread": (max(geomeans) - min(geomeans)) / statistics.median(geomeans),
            "wall_s": [r.wall_s for r in runs], "first_wall_s": first.wall_s, "shapes": shapes,
            "phases_s": runs[-1].phases_s, "first_phases_s": first.phases_s,
            "median_phases_s": {k: round(statistics.median(r.phases_s.get(k, 0.0) for r in runs), 3)
                                for k in runs[-1].phases_s},
            "sandbox": runs[0].device.get("sandbox"), "namespaces": runs[0].device.get("namespaces"),
            "verdicts": verdicts}


def _clocks(result) -> dict[str, dict]:
    """Per timed shape: whose figure it is, and the judge's own estimate and standard error beside it."""
    return {shape_label(s.shape): {"clock": s.clock, "judge_us": s.judge_us, "judge_se_us": s.judge_se_us}
            for s in result.shapes if s.time_us}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(builtin_names()))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-spare", action="store_true", help="no next worker starting beside each evaluation "
                                                               "(a search always has one)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    judging_process()  # this process judges and nothing else, like a local slot
    device = detect()
    if device.interpreted:
        print("benchmarks/evaluator.py needs a GPU (timings under the interpreter mean nothing)", file=sys.stderr)
        return 2
    stamp = datetime.date.today().isoformat()
    out = Path(args.out) / f"evaluator-{device.name.replace(' ', '_')}-{stamp}{'-no-spare' if args.no_spare else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.problems.split(","):
        rows.append(bench_problem(name, args.repeats, spare=not args.no_spare))
        print(json.dumps(rows[-1]), flush=True)
        # Written after every problem so a run cut short keeps what it measured.
        out.write_text(json.dumps({"device": device.name, "date": stamp, "torch": torch.__version__,
                                   "triton": triton.__version__, "results": rows}, indent=2))
    print(f"\n{device.name}  torch {torch.__version__}  triton {triton.__version__}")
    print(f"{'problem':<22}{'status':<8}{'spread':>8}{'ratio min':>11}{'ratio max':>11}{'wall s':>8}")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['problem']:<22}{r['status']:<8} {r['message']}")
            continue
        if r["not_ok"]:
            print(f"{r['problem']:<22}{r['not_ok']} of {len(r['verdicts'])} evaluations not ok: "
                  + "; ".join(v["message"][:200] for v in r["verdicts"] if v["status"] != "ok"))
        ratios = [s["ratio"] for s in r["shapes"]]
        print(f"{r['problem']:<22}{'ok':<8}{r['spread']:>8.2%}{min(ratios):>11.3f}{max(ratios):>11.3f}"
              f"{statistics.median(r['wall_s']):>8.2f}  median phases {r['median_phases_s']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
