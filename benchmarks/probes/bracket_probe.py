"""Where the judge's brackets go: every timed and null command of one evaluation, round by round.

The forged-time check compares the worker's reported time with the judge's own estimate, the
median bracket of timed commands less the median bracket of null ones. On an idle H100
(2026-11-26) GPU MODE's pmpp_v2 sort solutions, honest, were estimated at 1.1-4.5 ms for calls of
0.2-0.6 ms. This evaluates one solution as `kscience eval` does, keeps every round the judge
measured, and prints for each shape and round the brackets of both kinds (median, 10th and 90th
percentile) beside the worker's event and host times, so a systematic excess of timed commands
can be told from jitter in both. The rounds go to OUT as JSON. Its answer on that H100 (same day,
at 1662842): jitter. Every command's bracket was 17-480 ms, nearly all of it the build of the
inputs (a Python loop over rows), and timed brackets differed from null ones by -15 to +25 ms at
calls of 0.2-5 ms; brackets less the worker's host time were as large for null calls as for
timed ones. Hence crosscheck.BUILD_SHARE; the table's `build` column is the judge's own build.

    python benchmarks/probes/bracket_probe.py --repo .refk --task pmpp_v2/sort_py [--solution submission.py]
        [--problem softmax] [--shapes benchmarks] [--spare] [--out DIR]
    (--spare: the next evaluation's worker starts during this one, as in a sweep or a run)
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
from kscience.evaluate.judge import crosscheck, measure
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest
from kscience.evaluate.sandbox import spares
from kscience.problems import load_problem, shape_label


def spread(values: list[float]) -> dict:
    """Median, 10th and 90th percentile of `values` (microseconds), or {} for none."""
    if not values:
        return {}
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731 - one-line helper
    return {"n": len(values), "median": statistics.median(values), "p10": at(0.1), "p90": at(0.9)}


def describe(shape: dict, rnd, build_us: float, idle_gap_us: float) -> dict:
    timed = [c for c in rnd.calls if c.kind == "timed"]
    nulls = [c for c in rnd.calls if c.kind == "null"]
    return {"shape": shape_label(shape), "doubt": rnd.doubt, "build_us": build_us, "idle_gap_us": idle_gap_us,
            "others": rnd.others, "outside_us": crosscheck.outside_us([c.event_us for c in timed] or [0.0],
                                                                        [c.host_us for c in timed] or [0.0], idle_gap_us),
            "timed_window_us": spread([c.window_us for c in timed]),
            "null_window_us": spread([c.window_us for c in nulls]),
            "event_us": spread([c.event_us for c in timed]), "host_us": spread([c.host_us for c in timed]),
            "timed_window_less_host_us": spread([c.window_us - c.host_us for c in timed]),
            "null_window_less_host_us": spread([c.window_us - c.host_us for c in nulls]),
            # the clocks' disagreement now, in this worker's state: a null call's host minus event time
            "null_host_less_event_us": spread([c.host_us - c.event_us for c in nulls]),
            "timed_host_less_event_us": spread([c.host_us - c.event_us for c in timed])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", help="an extract of gpu-mode/reference-kernels (with --task)")
    ap.add_argument("--task", default="pmpp_v2/sort_py")
    ap.add_argument("--solution", default="submission.py", help="a file of the task's folder")
    ap.add_argument("--problem", help="a built-in problem instead, judged with its seed")
    ap.add_argument("--shapes", default="benchmarks", choices=("tests", "benchmarks", "all"))
    ap.add_argument("--spare", action="store_true", help="start the next evaluation's worker during this one")
    ap.add_argument("--out", default=str(Path(__file__).parents[1] / "results"))
    args = ap.parse_args()
    if args.problem:
        problem = load_problem(args.problem)
        source, label = problem.seed_source, f"{args.problem} seed"
    else:
        if not args.repo:
            raise SystemExit("bracket_probe: --repo (with --task) or --problem")
        folder = Path(args.repo) / "problems" / args.task
        problem = load_problem(str(folder))
        source, label = (folder / args.solution).read_text(), f"{args.task} {args.solution}"

    rounds = []
    doubt = measure._doubt

    def kept(session, rnd, empty_cap, shape):
        rnd.doubt = doubt(session, rnd, empty_cap, shape)  # measure sets it again from the same call
        rounds.append(describe(shape, rnd, session.build_us(shape), session.worker_info.get("idle_gap_us", 0.0)))
        return rnd.doubt

    measure._doubt = kept
    result = evaluate(EvalRequest(problem=problem.locator, source=source, shapes=args.shapes), problem=problem,
                      keep_spare=args.spare)
    if args.spare:
        label += " (with a spare starting)"
        spares.close_spares()
    device = detect()
    print(f"{device.name}  {label}: {result.status}  {result.message[:200]}")
    print(f"{'shape':40s}{'event':>9s}{'host':>9s}{'timed br.':>11s}{'null br.':>10s}{'t-n':>9s}"
          f"{'t-host':>9s}{'n-host':>9s}{'null p10-p90':>16s}{'build':>10s}{'outside':>9s}  doubt")
    for r in rounds:
        t, n = r["timed_window_us"], r["null_window_us"]
        print(f"{r['shape'][:39]:40s}{r['event_us']['median']:9.1f}{r['host_us']['median']:9.1f}{t['median']:11.1f}"
              f"{n.get('median', float('nan')):10.1f}{t['median'] - n.get('median', float('nan')):9.1f}"
              f"{r['timed_window_less_host_us']['median']:9.1f}"
              f"{r['null_window_less_host_us'].get('median', float('nan')):9.1f}"
              f"{n.get('p10', float('nan')):8.0f}-{n.get('p90', float('nan')):<7.0f}{r['build_us']:10.1f}"
              f"{r['outside_us']:9.1f}  {(r['doubt'] or '')[:60]}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "", device.name.replace(" ", "_"))
    what = re.sub(r"[^A-Za-z0-9_.-]+", "-", label)
    path = out / f"bracket-probe-{what}-{name}-{datetime.date.today().isoformat()}.json"
    path.write_text(json.dumps({"device": device.name, "candidate": label, "status": result.status,
                                "message": result.message, "rounds": rounds}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
