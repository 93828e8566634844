"""Precision on the label and the baseline that counts, on real kernels (issue 54, items 2 and 3).

Each (problem file, kernel) pair is judged as `kscience eval` judges it: the verdict under the default
precision policy, its precision against a float64 evaluation of the reference (and whether it is marked
REDUCED PRECISION), whether `--precision reference` would reject it, and its speed-up against PyTorch eager,
torch.compile and the faster of the two, all timed by the same judge. torch.compile is timed once per problem
and taken from the cache beside every database (kscience.run.baseline_cache) for the next kernel of that
problem: the table says which, and what the baselines cost each time.

    python3 benchmarks/precision_baselines.py --trial DIR [--only 22,99] [--budget-s 540] [--out DIR]
    python3 benchmarks/precision_baselines.py --pair PROBLEM.py=KERNEL.py [--pair ...]
    python3 benchmarks/precision_baselines.py --quick     # the CPU check: a KernelBench file, a bf16 and an fp32 kernel

`--trial DIR` takes DIR/problems/NN_*.py and every DIR/kernels/NN-*.py (the layout of a real-model trial's
folder, e.g. real-model-kernelbench-2026-12-01). No new pair starts once `--budget-s` has passed; what ran is
written. Results: benchmarks/results/precision-baselines-<device>-<date>-at-<commit>.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kscience.cli.eval_baselines import judge_baselines
from kscience.device import detect
from kscience.evaluate.executors.base import visible_gpus
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest, under_policy
from kscience.problems import load_problem, precision as P

QUICK_PROBLEM = Path(__file__).parents[1] / "tests" / "data" / "kernelbench_linear_relu.py"
_HEAD = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
         "    def __init__(self, in_features, out_features):\n        super().__init__()\n"
         "        self.linear = nn.Linear(in_features, out_features)\n\n    def forward(self, x):\n")
QUICK_KERNELS = {  # the same layer computed in bf16, and in fp32 as the reference does
    "in_bf16": _HEAD + ("        w, b = self.linear.weight.to(torch.bfloat16), self.linear.bias.to(torch.bfloat16)\n"
                        "        return torch.relu(x.to(torch.bfloat16) @ w.T + b).float()\n"),
    "in_fp32": _HEAD + "        return torch.relu(x @ self.linear.weight.T + self.linear.bias)\n",
}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def trial_pairs(folder: Path, only: set[str]) -> list[tuple[Path, Path]]:
    problems = {p.name.split("_")[0]: p for p in sorted((folder / "problems").glob("*.py"))}
    pairs = []
    for kernel in sorted((folder / "kernels").glob("*.py")):
        number = kernel.name.split("-")[0]
        if number in problems and (not only or number in only):
            pairs.append((problems[number], kernel))
    return pairs


def judge_pair(problem_file: Path, kernel: Path, gpu: int | None) -> dict:
    problem = load_problem(str(problem_file))
    request = EvalRequest(problem=problem.locator, source=kernel.read_text())
    t0 = time.monotonic()
    result = under_policy(request, evaluate(request, gpu=gpu, problem=problem))
    judged_s = time.monotonic() - t0
    strict = under_policy(dataclasses.replace(request, precision="reference"), dataclasses.replace(result))
    row = {"problem": problem.name, "kernel": kernel.name, "status": result.status, "message": result.message[:200],
           "geomean_us": result.geomean_us, "precision": result.precision, "label": P.label(result.precision),
           "rejected_under_reference": result.ok and not strict.ok, "judged_s": round(judged_s, 1)}
    if result.ok and result.geomean_us:
        t0 = time.monotonic()
        against = judge_baselines(problem, result, gpu, False, say=lambda line: print(f"  {line}", file=sys.stderr))
        row.update(baselines=against, baselines_s=round(time.monotonic() - t0, 1),
                   compile_reused=str(against["compiled"].get("note", "")).startswith("timed by "))
    return row


def _x(v) -> str:
    return f"{v:.2f}x" if v else "-"


def _us(v) -> str:
    return f"{v:,.1f}" if v else "-"


def table(rows: list[dict]) -> list[str]:
    lines = ["| problem | kernel | status | us | eager us | compile us | vs eager | vs compile | vs faster | "
             "precision | rejected under reference | torch.compile | baselines s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r.get("baselines") or {}
        eager, compiled = (b.get("eager") or {}).get("geomean_us"), (b.get("compiled") or {}).get("geomean_us")
        compile_note = ("reused" if r.get("compile_reused") else "timed" if compiled else
                        (b.get("compiled") or {}).get("note") or (b.get("compiled") or {}).get("status") or "-")
        lines.append(f"| {r['problem']} | {r['kernel']} | {r['status']} | {_us(r['geomean_us'])} | {_us(eager)} | "
                     f"{_us(compiled)} | {_x(b.get('speedup_eager'))} | {_x(b.get('speedup_compiled'))} | "
                     f"{_x(b.get('speedup_faster'))} | {r['label'] or '-'} | {r['rejected_under_reference']} | "
                     f"{compile_note} | {r.get('baselines_s', '-')} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trial", metavar="DIR", help="a trial folder: problems/NN_*.py and kernels/NN-*.py")
    ap.add_argument("--only", default="", help="problem numbers of --trial to judge, e.g. 22,99")
    ap.add_argument("--pair", action="append", default=[], metavar="PROBLEM=KERNEL")
    ap.add_argument("--quick", action="store_true", help="the CPU check (see the docstring)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no pair after this many seconds")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    pairs = [(Path(a), Path(b)) for a, _, b in (p.partition("=") for p in args.pair)]
    if args.trial:
        pairs += trial_pairs(Path(args.trial), {n for n in args.only.split(",") if n})
    scratch = None
    if args.quick:
        scratch = Path(tempfile.mkdtemp(prefix="kscience-precision-"))
        for name, source in QUICK_KERNELS.items():
            (scratch / f"{name}.py").write_text(source)
            pairs.append((QUICK_PROBLEM, scratch / f"{name}.py"))
    if not pairs:
        ap.error("nothing to judge: give --trial DIR, --pair PROBLEM=KERNEL or --quick")
    gpu = 0 if visible_gpus() else None
    device, started, rows = detect(), time.monotonic(), []
    for problem_file, kernel in pairs:
        if time.monotonic() - started > args.budget_s:
            print(f"budget of {args.budget_s:g} s spent: {len(pairs) - len(rows)} pair(s) not judged", file=sys.stderr)
            break
        print(f"{problem_file.name} {kernel.name}", file=sys.stderr)
        rows.append(judge_pair(problem_file, kernel, gpu))
    lines = table(rows)
    print("\n".join(lines))
    stem = (f"precision-baselines-{re.sub(r'[^A-Za-z0-9]+', '_', device.name).strip('_')}-{datetime.date.today()}"
            f"-at-{commit()}"
            + ("-quick" if args.quick else ""))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": device.describe(), "commit": commit(), "date": str(datetime.date.today()),
            "rule": P.RULE, "pairs_asked": len(pairs)}
    (out / f"{stem}.json").write_text(json.dumps({**meta, "rows": rows}, indent=1, default=str))
    (out / f"{stem}.md").write_text(f"# Precision and baselines, {device.name}, {meta['date']} at {meta['commit']}\n\n"
                                    f"Rule: {P.RULE}.\n\n" + "\n".join(lines) + "\n")
    print(f"wrote {out / stem}.json and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
