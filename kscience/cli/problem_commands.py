"""Subcommands about problems and single candidates: problems, seed, eval."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from kscience.evaluate.executors.base import visible_gpus
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest, confinement_line
from kscience.cli.eval_baselines import baseline_lines, judge_baselines
from kscience.problems.precision import label as precision_label
from kscience.run.config import parse_sets
from kscience.device import detect
from kscience.problems import builtin_names, load_problem, shape_label
from kscience.problems.fit import fit_reason
from kscience.record.text import fmt_seconds, fmt_us
from kscience.usage import UsageError


def cmd_problems(args) -> int:
    rows = [load_problem(n).summary() for n in builtin_names()]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        width = max(len(r["name"]) for r in rows)
        for r in rows:
            print(f"{r['name']:<{width}}  {r['description']}")
    return 0


def cmd_seed(args) -> int:
    problem = load_problem(args.problem, parse_sets(args.set))
    if not problem.seed_source:
        raise UsageError(f"problem {problem.name} ships no seed kernel")
    sys.stdout.write(problem.seed_source)
    return 0


def cmd_eval(args) -> int:
    overrides = parse_sets(args.set)
    problem = load_problem(args.problem, overrides)  # a wrong problem name is the first thing to say
    path = Path(args.candidate)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read candidate {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    too_big = fit_reason(problem, detect())
    if too_big:  # before a worker exists: the judge would fail to allocate and blame the candidate
        raise UsageError(f"{problem.name} {too_big}")
    request = EvalRequest(problem=problem.locator, source=source, overrides=overrides, shapes=args.shapes,
                          timeout_s=problem.time_limit_s if args.timeout is None else args.timeout,
                          allow_weak_confinement=args.unconfined, precision=args.precision)
    gpu = 0 if visible_gpus() else None
    result = evaluate(request, gpu=gpu, problem=problem)
    # The sandbox runs the source as candidate.py: name the user's own file instead.
    for name in ("message", "stdout_tail", "stderr_tail"):
        setattr(result, name, _own_file(getattr(result, name), str(path)))
    # As KernelBench's own scripts do: the candidate's speed-up against PyTorch eager and torch.compile, judged
    # here by the same judge (not for a candidate without a time: nothing to set them against).
    against = (judge_baselines(problem, result, gpu, args.unconfined, say=_say)
               if args.baselines and result.ok and result.geomean_us else None)
    if args.json:
        print(json.dumps({**result.to_dict(), **({"baselines": against} if against else {})}, indent=2))
    else:
        print("\n".join(eval_lines(result) + (baseline_lines(against) if against else [])))
    return 0 if result.ok else 1


def _say(line: str) -> None:
    print(f"kscience: {line}", file=sys.stderr)


def _own_file(text: str, path: str) -> str:
    return re.sub(r"(?:[^\s\"']*/)?candidate\.py\b", lambda _: path, text or "")


def eval_lines(result) -> list[str]:
    """What `kscience eval` prints: the verdict, where and how it was timed, then each shape."""
    lines = [f"{result.status}: {result.message}",
             f"device: {result.device.get('name', 'unknown')}",
             f"timing: {result.timing_label or 'none'}",
             f"evaluated in {fmt_seconds(result.wall_s)}",
             confinement_line(result.confinement)]
    for s in result.shapes:
        t = f"{fmt_us(s.time_us, ' us'):>14} ± {s.std_us:.2f} (n={s.n})" if s.time_us else ""
        lines.append(f"  {'ok ' if s.ok else 'BAD'} {s.phase:<9} {shape_label(s.shape):<28} {t}".rstrip())
    if result.precision:
        lines.append(f"precision: {precision_label(result.precision)}")
    if result.failing_shape is not None:
        lines.append(f"  failing shape: {shape_label(result.failing_shape)}")
    if result.status != "ok" and (result.stderr_tail or result.stdout_tail):
        lines += ["--- candidate output (tail) ---", (result.stdout_tail + result.stderr_tail)[-1500:]]
    return lines
