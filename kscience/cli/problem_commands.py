"""Subcommands about problems and single candidates: problems, seed, eval."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import threading
import time
from pathlib import Path

from kscience.evaluate.executors.base import visible_gpus
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import COMPILE_ERROR, REJECTED, EvalRequest, confinement_line
from kscience.cli.eval_baselines import baseline_lines, judge_baselines
from kscience.problems.precision import label as precision_label
from kscience.run.config import parse_sets
from kscience.device import detect
from kscience.problems import builtin_names, load_problem, shape_label
from kscience.problems.fit import fit_reason
from kscience.record.text import fmt_seconds, fmt_timing
from kscience.cli.progress import Progress
from kscience.run.events import EvaluationWaiting
from kscience.run.waiting import running_state, say_running_after
from kscience.usage import UsageError


SHAPES_WIDTH = 110  # a long list of shapes wraps at this many columns


def cmd_problems(args) -> int:
    rows = [load_problem(n, parse_sets(args.set)).summary() for n in args.problem or builtin_names()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['name']}  {r['description']}")
        for which, what in (("tests", "test shapes on a GPU"), ("benchmarks", "benchmark shapes on a GPU"),
                            ("cpu_tests", "test shapes under the CPU interpreter"),
                            ("cpu_benchmarks", "benchmark shapes under the CPU interpreter")):
            labels = "; ".join(s["label"] for s in r[which]) or "none"
            print(textwrap.fill(f"{what} ({len(r[which])}): {labels}", SHAPES_WIDTH, initial_indent="  ",
                                subsequent_indent="      ", break_on_hyphens=False))
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
                          timeout_s=problem.time_limit_s, step_limit_s=args.eval_timeout_s,
                          build_limit_s=args.build_limit_s, allow_weak_confinement=args.unconfined,
                          precision=args.precision)
    gpu = 0 if visible_gpus() else None
    limit = f"at most {args.eval_timeout_s:g} s per step" if args.eval_timeout_s else "the judge's limits per step"
    print(f"kscience: judging {path} against {problem.name} on {detect().name}, {limit}", file=sys.stderr)
    with Watch(str(path), args.eval_timeout_s) as watch:
        result = evaluate(request, gpu=gpu, problem=problem, on_phase=watch.phase)
    # The sandbox runs the source as candidate.py: name the user's own file instead.
    for name in ("message", "stdout_tail", "stderr_tail"):
        setattr(result, name, _own_file(getattr(result, name), str(path)))
    # As KernelBench's own scripts do: the candidate's speed-up against PyTorch eager and torch.compile, judged
    # here by the same judge (not for a candidate without a time: nothing to set them against).
    against = (judge_baselines(problem, result, gpu, args.unconfined, say=_say)
               if args.baselines and result.ok and result.geomean_us else None)
    if args.json:
        print(json.dumps({**result.to_dict(), **({"baselines": against.to_dict()} if against else {})}, indent=2))
    else:
        print("\n".join(eval_lines(result) + (baseline_lines(against) if against else [])))
    return 0 if result.ok else 1


def _say(line: str) -> None:
    print(f"kscience: {line}", file=sys.stderr)


def _own_file(text: str, path: str) -> str:
    return re.sub(r"(?:[^\s\"']*/)?candidate\.py\b", lambda _: path, text or "")


class Watch:
    """A lone evaluation's progress line: once it has run `say_running_after` its limit, and as often again, it
    says what the judge is doing and under which limit, as a run's evaluations do (the same event and line)."""

    def __init__(self, name: str, step_limit_s: float | None):
        self.name, self.step_limit_s = name, step_limit_s
        self.doing: str | None = None
        self._done = threading.Event()
        self._progress = Progress(0, bar=False)
        self._thread = threading.Thread(target=self._say, name="kscience-eval-watch", daemon=True)

    def phase(self, doing: str) -> None:
        self.doing = doing

    def _say(self) -> None:
        every, started = say_running_after(self.step_limit_s), time.monotonic()
        while not self._done.wait(every):
            self._progress(EvaluationWaiting(candidate_id=self.name, iteration=0,
                                             state=running_state(self.doing, self.step_limit_s),
                                             waited_s=round(time.monotonic() - started, 1)))

    def __enter__(self) -> "Watch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()


def short_confinement_line(confinement: dict, failed_on_import: bool = False, refused_unrun: bool = False) -> str:
    """The isolation layers by name where all are in force (`--json` has each in full); every detail where one
    is missing, or where the candidate failed on import (the sandbox may be why)."""
    if not confinement and refused_unrun:
        return "confinement: none needed (the source was refused before any worker ran it)"
    if confinement.get("weak") or not confinement or failed_on_import:
        return confinement_line(confinement)
    names = [name.replace("_", " ") for name in ("landlock", "namespaces", "cgroup", "reaper", "memory_cap",
                                                 "env_filter", "compile_cache") if name in confinement]
    return f"confinement: {', '.join(names)} (--json gives each layer in full)"


def eval_lines(result) -> list[str]:
    """What `kscience eval` prints: the verdict, where and how it was timed, then each shape, its time the
    median of its timed calls with their standard deviation and count."""
    lines = [f"{result.status}: {result.message}",
             f"device: {result.judged_on.name or 'unknown'}",
             f"timing: {result.timing_label or 'none'}",
             f"evaluated in {fmt_seconds(result.wall_s)}",
             short_confinement_line(result.confinement, result.status == COMPILE_ERROR, result.status == REJECTED)]
    for s in result.shapes:
        t = fmt_timing(s.time_us, s.std_us, s.n) if s.time_us else ""
        lines.append(f"  {'ok ' if s.ok else 'BAD'} {s.phase:<9} {shape_label(s.shape):<28} {t}".rstrip())
    if result.precision:
        lines.append(f"precision: {precision_label(result.precision)}")
    if result.failing_shape is not None:
        lines.append(f"  failing shape: {shape_label(result.failing_shape)}")
    if result.status != "ok" and (result.stderr_tail or result.stdout_tail):
        lines += ["--- candidate output (tail) ---", (result.stdout_tail + result.stderr_tail)[-1500:]]
    return lines
