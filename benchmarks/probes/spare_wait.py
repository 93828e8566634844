"""How long does an evaluation wait for its worker, with one spare per slot and with two?

A search evaluates one candidate after another on a slot; each evaluation takes the oldest spare
worker, started earlier so that its Python and torch imports overlap the evaluations before it.
If an evaluation is shorter than those imports, one spare is not ready in time and the next
evaluation waits in its `start` phase (an H100 fp8_blockscale_gemm evaluation waited 2 s). This
evaluates the same seed `--evaluations` times in a row, as a slot does, once per spare count, and
prints the `start` phase (the wait), the `import` phase (the candidate's own import and the
worker's GPU setup) and the wall seconds of each.
It runs anywhere: under the CPU interpreter the evaluations are short and torch imports slowly, the
case that two spares are for. Results go to benchmarks/results/spare-wait-<device>-<date>.json.

    python benchmarks/probes/spare_wait.py [--problem softmax] [--evaluations 6] [--spares 1,2] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
from pathlib import Path

from kscience.device import detect
from kscience.evaluate.judge.evaluation import evaluate, judging_process
from kscience.evaluate.result import EvalRequest
from kscience.evaluate.sandbox import spares
from kscience.problems import load_problem


def series(request: EvalRequest, evaluations: int, count: int) -> list[dict]:
    """One slot's evaluations in a row with `count` spares; the first, which starts them all, is left out."""
    spares.close_spares()  # every series starts from no spare, as a fresh slot does
    spares.SPARES_PER_SLOT = count
    rows = []
    for _ in range(evaluations + 1):
        result = evaluate(request, keep_spare=True)
        if not result.ok:
            raise SystemExit(f"spare_wait: the seed failed: {result.status}: {result.message}")
        rows.append({"wall_s": result.wall_s, "start_s": result.phases_s.get("start", 0.0),
                     "import_s": result.phases_s.get("import", 0.0)})
    return rows[1:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="softmax")
    ap.add_argument("--shapes", choices=("tests", "benchmarks", "all"), default="all")
    ap.add_argument("--evaluations", type=int, default=6, help="evaluations per spare count, after a first one")
    ap.add_argument("--spares", default="1,2", help="spare counts to compare")
    ap.add_argument("--out", default=str(Path(__file__).parents[1] / "results"))
    args = ap.parse_args()
    judging_process()  # this process judges and nothing else, like a local slot
    device = detect()
    request = EvalRequest(problem=args.problem, source=load_problem(args.problem).seed_source, shapes=args.shapes)
    evaluate(request)  # warms the compile cache, so every series sees the same one
    report = {"device": device.name, "date": datetime.date.today().isoformat(), "problem": args.problem,
              "shapes": args.shapes, "series": {}}
    for count in (int(n) for n in args.spares.split(",")):
        report["series"][count] = series(request, args.evaluations, count)
    spares.close_spares()

    print(f"\n{device.name}  {report['date']}  {args.problem} ({args.shapes} shapes), "
          f"{args.evaluations} evaluations in a row per spare count")
    print(f"{'spares':>7}{'start s (median)':>18}{'start s (max)':>15}{'import s (median)':>19}{'wall s (median)':>17}"
          "  start s, in order")
    for count, rows in report["series"].items():
        waits = [r["start_s"] for r in rows]
        print(f"{count:>7}{statistics.median(waits):>18.2f}{max(waits):>15.2f}"
              f"{statistics.median(r['import_s'] for r in rows):>19.2f}"
              f"{statistics.median(r['wall_s'] for r in rows):>17.2f}  " + " ".join(f"{w:.2f}" for w in waits))
    tag = re.sub(r"[^A-Za-z0-9_.-]", "", device.name.replace(" ", "_"))
    out = Path(args.out) / f"spare-wait-{tag}-{report['date']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
