"""`kscience` on the command line: a thin view over problems, the evaluator and runs.

Exit codes: 0 success (a candidate that is ok), 1 a candidate that is not ok or a run that
failed, 2 a usage or problem error. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kscience.problems import ProblemError, builtin_names, load_problem, shape_label


class UsageError(Exception):
    """Bad arguments or input files: exit code 2."""


def parse_sets(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--set expects NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


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
    from kscience.evaluate.judge import evaluate
    from kscience.evaluate.result import EvalRequest, confinement_line

    path = Path(args.candidate)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read candidate {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    overrides = parse_sets(args.set)
    problem = load_problem(args.problem, overrides)
    request = EvalRequest(problem=problem.locator, source=source, overrides=overrides, shapes=args.shapes,
                          timeout_s=args.timeout, allow_weak_confinement=args.unconfined)
    result = evaluate(request, gpu=0 if _has_gpu() else None, problem=problem)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(f"{result.status}: {result.message}")
        print(f"device: {result.device.get('name')} ({result.timing_label}); {result.wall_s:.1f}s")
        print(confinement_line(result.confinement))
        for s in result.shapes:
            t = f"{s.time_us:12.2f} us ± {s.std_us:.2f} (n={s.n})" if s.time_us else "".rjust(12)
            print(f"  {'ok ' if s.ok else 'BAD'} {s.phase:<9} {shape_label(s.shape):<28} {t}")
        if result.failing_shape is not None:
            print(f"  failing shape: {shape_label(result.failing_shape)}")
        if result.status != "ok" and (result.stderr_tail or result.stdout_tail):
            print("--- candidate output (tail) ---")
            print((result.stdout_tail + result.stderr_tail)[-1500:])
    return 0 if result.ok else 1


def _has_gpu() -> bool:
    from kscience.evaluate.executor import visible_gpus

    return bool(visible_gpus())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kscience", description="Evolve GPU kernels with an LLM scientist.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("problems", help="list built-in problems")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_problems)

    s = sub.add_parser("seed", help="print a problem's seed kernel")
    s.add_argument("problem")
    s.add_argument("--set", action="append", metavar="NAME=VALUE", default=[])
    s.set_defaults(func=cmd_seed)

    s = sub.add_parser("eval", help="evaluate one candidate kernel")
    s.add_argument("problem", help="built-in name, KernelBench .py file or GPU MODE directory")
    s.add_argument("candidate", help="Python file defining custom_kernel(data) (or ModelNew)")
    s.add_argument("--json", action="store_true")
    s.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="overall time limit")
    s.add_argument("--shapes", choices=("tests", "benchmarks", "all"), default="all")
    s.add_argument("--set", action="append", metavar="NAME=VALUE", default=[],
                   help="override a module-level constant of a KernelBench file")
    s.add_argument("--unconfined", action="store_true",
                   help="run even where Landlock or namespaces are missing (the verdict says which)")
    s.set_defaults(func=cmd_eval)

    from kscience.run_commands import add_run_commands

    add_run_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ProblemError) as exc:
        print(f"kscience: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kscience: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `kscience show ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
