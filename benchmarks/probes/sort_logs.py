"""What does torch.compile say while GPU MODE's pmpp sort is judged, in the evaluations rejected as side work?

The pmpp sort submission (`torch.sort` under `torch.compile(mode="reduce-overhead")`) is rejected as side
work in some evaluations of an idle H100 and ok in others, with the same code (2026-11-27: 3 of 5, 1 of 3).
The rejected ones differ in both figures: the small shapes' event times are up to 1.7x higher and 25-35 us
more per call falls outside the events, while the null calls show the same host state as in ok ones
(`undo_layers.py --variants none,none,none`). Something in the candidate's own call path differs by
evaluation. pmpp_v2's submission, which writes into a buffer it is given, is ok every time.

This judges the submission --evaluations times with torch's own logging switched on inside the candidate
(recompilations and their reasons, CUDA graph recordings, skipped CUDA graphs, performance hints), and
prints per evaluation the verdict, the shape order's seed, each benchmark shape's event and outside times
and the log lines that say why torch.compile did what it did. Whether rejected evaluations recompile with
dynamic shapes, skip CUDA graphs or record again is then in the output, next to the order that led to it.

    python benchmarks/probes/sort_logs.py [--task tests/data/gpumode/reference-kernels/pmpp/sort_py]
        [--evaluations 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "data" / "gpumode" / "reference-kernels" / "pmpp" / "sort_py"
# Before the submission's own lines: torch's logging to stderr, which the judge sends back (stderr_tail).
LOGGING = ("import torch._logging\n"
           "torch._logging.set_logs(recompiles=True, cudagraphs=True, perf_hints=True, graph_breaks=True)\n")
SAID = re.compile(r"recompil|skipping cudagraph|re-record|cudagraph|dynamic|guard", re.IGNORECASE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default=str(TASK))
    ap.add_argument("--evaluations", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    import torch

    from kscience.device import detect
    from kscience.evaluate.judge.evaluation import evaluate
    from kscience.evaluate.result import EvalRequest
    from kscience.problems import load_problem, shape_label

    problem = load_problem(args.task)
    source = LOGGING + (Path(args.task) / "submission.py").read_text()
    rows = []
    for i in range(args.evaluations):
        result = evaluate(EvalRequest(problem=problem.locator, source=source, timeout_s=problem.time_limit_s),
                          gpu=0 if torch.cuda.is_available() else None, problem=problem, keep_spare=True)
        shapes = {shape_label(s.shape): [s.time_us, s.judge_us] for s in result.shapes if s.phase == "benchmark"}
        said = [line.strip()[:300] for line in result.stderr_tail.splitlines() if SAID.search(line)]
        rows.append({"status": result.status, "message": result.message[:600], "wall_s": result.wall_s,
                     "shape_order_seed": result.shape_order_seed, "benchmark_time_and_judge_us": shapes,
                     "torch_said": said, "stderr_tail": result.stderr_tail[-4000:]})
        print(f"evaluation {i + 1}: {result.status} in {result.wall_s:.1f} s, order seed {result.shape_order_seed}: "
              f"{result.message[:300]}", flush=True)
        for label, (event, outside) in shapes.items():
            print(f"    {label:>22}  event {event or float('nan'):9.1f} us  outside {outside or float('nan'):7.1f} us")
        for line in said[:40]:
            print(f"    torch: {line}")
    device = detect().name
    out = Path(args.out) / f"sort-logs-{device.replace(' ', '_')}-{datetime.date.today()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"probe": "sort_logs", "device": device, "date": str(datetime.date.today()),
                               "task": str(args.task), "torch": torch.__version__, "evaluations": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
