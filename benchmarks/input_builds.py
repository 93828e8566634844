"""Where a GPU MODE evaluation's seconds go, and how many times it builds each shape's inputs.

GPU MODE's pmpp sort builds its numbers row by row from Python: on an H100 one build of its
largest shape (100,000,000 elements, 10,000 rows) takes most of a second, and every build lands
in one evaluation's phases. This judges a task's solution N times (default: the published pmpp
sort submission in tests/data) and prints, per evaluation, its verdict, wall time and phases
(`kscience eval --json` shows the same `phases_s`), and per benchmark shape the inputs the judge
built in its own process (by the phase that asked: `builds` before the import, `check`, `time`
while the worker prepares a round, `recheck`) and those the worker built (one per check, timed or
null call and profiled shape; one per warm-up set in `prepare`, tests/test_input_builds.py holds
the worker to that). Then, for the evaluations after the first (a spare worker waiting, as in a
search), their seconds beside the import against issue 38's target. Writes everything to OUT as
JSON named by device, date and commit.

    python benchmarks/input_builds.py [--task tests/data/gpumode/reference-kernels/pmpp/sort_py] [-n 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Issue 38's target: a pmpp task judged in this many seconds warm (a spare worker waiting, as in a
# search), beside the solution's own import (torch.compile's, for the published sort submissions).
TARGET_S = 15.0
sys.path.insert(0, str(ROOT))

from kscience.evaluate.judge import session as session_module  # noqa: E402
from kscience.evaluate.judge.evaluation import evaluate, judging_process  # noqa: E402
from kscience.evaluate.result import EvalRequest  # noqa: E402
from kscience.problems import load_problem, shape_label  # noqa: E402

SORT = ROOT / "tests" / "data" / "gpumode" / "reference-kernels" / "pmpp" / "sort_py"


def counted(problem, source: str, gpu: int | None) -> dict:
    """One evaluation, with each input build it made counted by shape and by who asked."""
    judge, worker = defaultdict(Counter), defaultdict(Counter)
    inputs, ask = session_module.Session.inputs, session_module.Session.ask

    def judge_inputs(self, seed, shape):
        judge[shape_label(shape)][self.phases.current() or "?"] += 1
        return inputs(self, seed, shape)

    def worker_asked(self, cmd, *a, **k):
        shape = cmd.get("shape") or getattr(self, "_timing_shape", None)
        if cmd.get("cmd") == "prepare":
            self._timing_shape = shape
            worker[shape_label(shape)]["prepare"] += max(1, min(cmd["warmup"], len(cmd["seeds"])))
        elif cmd.get("cmd") in ("check", "kernels"):
            worker[shape_label(shape)][cmd["cmd"]] += 1
        elif cmd.get("cmd") == "call":
            worker[shape_label(shape)][cmd["kind"]] += 1
        return ask(self, cmd, *a, **k)

    session_module.Session.inputs, session_module.Session.ask = judge_inputs, worker_asked
    try:
        result = evaluate(EvalRequest(problem=problem.locator, source=source, timeout_s=problem.time_limit_s),
                          gpu=gpu, problem=problem, keep_spare=True)
    finally:
        session_module.Session.inputs, session_module.Session.ask = inputs, ask
    shapes = [shape_label(s.shape) for s in result.shapes if s.phase == "benchmark"]
    return {"status": result.status, "message": result.message, "wall_s": result.wall_s,
            "phases_s": result.phases_s, "device": result.device.get("name", "unknown"),
            "setup_s": result.device.get("setup_s"),
            "shapes": [{"shape": label, "judge": dict(judge[label]), "worker": dict(worker[label]),
                        **next({"n": s.n, "time_us": s.time_us, "note": s.message} for s in result.shapes
                               if shape_label(s.shape) == label and s.phase == "benchmark")}
                       for label in shapes]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default=str(SORT), help="a GPU MODE task folder")
    ap.add_argument("--source", help="the solution (default: the task's submission.py)")
    ap.add_argument("-n", type=int, default=3, help="evaluations")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    import torch

    judging_process()
    problem = load_problem(args.task)
    source = Path(args.source or Path(args.task) / "submission.py").read_text()
    gpu = 0 if torch.cuda.is_available() else None
    runs = []
    for i in range(args.n):
        r = counted(problem, source, gpu)
        runs.append(r)
        phases = " ".join(f"{k} {v:.1f}" for k, v in r["phases_s"].items() if v >= 0.05)
        print(f"#{i + 1} {r['status']} in {r['wall_s']:.1f} s: {phases}  ({r['message'][:120]})")
        for s in r["shapes"]:
            print(f"    {s['shape']:<24} n={s['n']:<4} {s['time_us'] or 0:>10.1f} us  judge {sum(s['judge'].values()):>3} {s['judge']}  "
                  f"worker {sum(s['worker'].values()):>3} {s['worker']}  {s['note'] or ''}")
    warm = [r["wall_s"] - r["phases_s"].get("import", 0.0) for r in runs[1:]]
    if warm:
        print(f"warm evaluations beside the import: {', '.join(f'{w:.1f}' for w in warm)} s "
              f"(target {TARGET_S:g} s: {'met' if max(warm) <= TARGET_S else 'not met'})")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    device = re.sub(r"[^A-Za-z0-9]+", "_", runs[0]["device"]).strip("_")
    out = Path(args.out) / (f"input-builds-{Path(args.task).parent.name}-{Path(args.task).name}-{device}-"
                            f"{datetime.date.today().isoformat()}-at-{commit}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"task": args.task, "commit": commit, "target_s": TARGET_S, "warm_beside_import_s": warm,
                               "runs": runs}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
