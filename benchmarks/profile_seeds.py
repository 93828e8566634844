"""What a profiler sees of every built-in seed, and what seeing it costs (issue 17).

For each built-in problem's seed: one evaluation of its benchmark shapes, the compile facts the
judge read after it (the Triton entries its worker recorded, the load_inline builds it made), its
speed of light per shape, then Nsight Compute on the shape with the most headroom
(outside the evaluation), with the 'not doing the work' check. Prints a table and the cost per
profiled candidate; writes benchmarks/results/profile-seeds-<device>-<date>.json.

    PYTHONPATH=$PWD python3 benchmarks/profile_seeds.py [--problems softmax,matmul] [--timeout 300] [--out DIR]
    (or: bash benchmarks/gpu_session.sh OUTDIR profile)
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.profile import ncu
from kscience.evaluate.result import EvalRequest
from kscience.run import profiling
from kscience.device import detect
from kscience.problems import builtin_names, load_problem, shape_label
from kscience.scientist.profile_report import render_profile


def profile_seed(name: str, timeout_s: float) -> dict:
    problem = load_problem(name)
    if problem.seed_source is None:
        return {"problem": name, "skipped": "no seed"}
    t0 = time.monotonic()
    result = evaluate(EvalRequest(problem=name, source=problem.seed_source, shapes="benchmarks")).to_dict()
    out = {"problem": name, "status": result["status"], "message": result["message"],
           "geomean_us": result["geomean_us"], "eval_s": round(time.monotonic() - t0, 2),
           "compile_facts_s": result["phases_s"].get("compile_facts"), **profiling.after_evaluation(problem, result)}
    if result["status"] != "ok":
        return out
    t0 = time.monotonic()
    counters = profiling.profile_with_ncu(problem, problem.seed_source, result, timeout_s=timeout_s,
                                          say=lambda m: print(m, file=sys.stderr))
    out["ncu_wall_s"] = round(time.monotonic() - t0, 2)
    out.update(counters or {})
    out["prompt_block"] = render_profile(out["compile_facts"], out.get("ncu"), out["sol"], out.get("flag"))
    return out


def _fmt(x, spec: str) -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def table(rows: list[dict]) -> str:
    head = (f"{'problem':22} {'kernels':>7} {'regs':>5} {'spill':>5} {'TC':>3} {'SOL worst':>9} "
            f"{'ncu shape':24} {'DRAM%':>6} {'tensor%':>7} {'occ%':>5} {'L2hit%':>6} {'ncu s':>6} flag")
    lines = [head, "-" * len(head)]
    for r in rows:
        facts, prof = r.get("compile_facts") or [], r.get("ncu") or {}
        sols = [s["fraction"] for s in r.get("sol") or []]
        regs = max((f["registers"] for f in facts if f["registers"] is not None), default=None)
        spills = max((f["spills"] for f in facts if f["spills"] is not None), default=None)
        tc = "yes" if any(f["tensor_core"] for f in facts) else "no" if facts else "-"
        lines.append(f"{r['problem']:22} {len(facts):>7} {_fmt(regs, 'd'):>5} {_fmt(spills, 'd'):>5} {tc:>3} "
                     f"{_fmt(min(sols) if sols else None, '.0%'):>9} {shape_label(prof.get('shape') or {})[:24]:24} "
                     f"{_fmt(prof.get('dram_pct'), '.0f'):>6} {_fmt(prof.get('tensor_pipe_pct'), '.0f'):>7} "
                     f"{_fmt(prof.get('occupancy_pct'), '.0f'):>5} {_fmt(prof.get('l2_hit_pct'), '.0f'):>6} "
                     f"{_fmt(r.get('profile_s'), '.1f'):>6} {r.get('flag') or r.get('skipped') or ''}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default=",".join(builtin_names()))
    ap.add_argument("--timeout", type=float, default=ncu.DEFAULT_TIMEOUT_S, help="seconds per ncu run")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    device = detect()
    if device.interpreted:
        print("profile_seeds: needs a GPU (compile facts and counters exist only for compiled kernels)")
        return 2
    if not ncu.available(say=lambda m: print(m, file=sys.stderr)):
        print("profile_seeds: going on with compile facts and speed of light only", file=sys.stderr)
    rows = [profile_seed(name, args.timeout) for name in args.problems.split(",")]
    print(table(rows))
    costs = [r["profile_s"] for r in rows if r.get("profile_s")]
    if costs:
        print(f"\nNsight Compute cost per profiled candidate: mean {sum(costs) / len(costs):.1f} s, "
              f"max {max(costs):.1f} s over {len(costs)} seed(s); compile facts cost "
              f"{max(r.get('compile_facts_s') or 0 for r in rows):.2f} s at most per evaluation")
    for r in rows:
        if r.get("prompt_block"):
            print(f"\n[{r['problem']}]\n{r['prompt_block']}")
    stamp = datetime.date.today().isoformat()
    out = Path(args.out) / f"profile-seeds-{device.name.replace(' ', '_')}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": device.describe(), "date": stamp, "ncu": ncu.ncu_path(),
                               "ncu_command": ncu.command("ncu", "<log>", ["<entry args>"], python="python"),
                               "seeds": rows}, indent=1, default=str))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
