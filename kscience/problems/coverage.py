"""What the Triton interpreter's shape lists cover of a problem's own, in words for a verdict.

Under the interpreter a problem is judged on its small CPU lists (`cpu_tests`, `cpu_benchmarks`):
a built-in's own small shapes, or for a GPU MODE task without such lists its smallest test shape,
checked and then timed in place of the benchmarks. A kernel right there may still be wrong on the
shapes the GPU judges (GPU MODE's published vectorsum cheat is exact below a million elements and
passes on the CPU), so a verdict under the interpreter says how much of the task it saw.
"""

from __future__ import annotations

from dataclasses import dataclass

from kscience.problems.spec import Problem, Shape, shape_label

NAMED_AT_MOST = 3  # stand-in shapes named in the verdict; beyond that, counted


@dataclass(frozen=True)
class Coverage:
    said: str  # e.g. "CPU interpreter: 1 of 5 test shapes checked; ...", or "" where nothing is left out
    timed_noun: str  # what the timed shapes are: "benchmark shape", or "CPU shape" where some are not


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _named(shapes: list[Shape], kind: str) -> str:
    """`kind` shapes by name, or by number where they are many: "test shape size=1023", "4 CPU-only shapes"."""
    if len(shapes) > NAMED_AT_MOST:
        return _count(len(shapes), kind)
    return f"{kind}{'' if len(shapes) == 1 else 's'} " + ", ".join(shape_label(s) for s in shapes)


def _tests_part(problem: Problem) -> str:
    own = [s for s in problem.cpu_tests if s in problem.tests]
    extra = len(problem.cpu_tests) - len(own)
    if len(own) == len(problem.tests) and not extra:
        return ""
    said = f"{len(own)} of {_count(len(problem.tests), 'test shape')} checked"
    return said + (f" (and {_count(extra, 'CPU-only shape')})" if extra else "")


def _benchmarks_part(problem: Problem) -> str:
    own = [s for s in problem.cpu_benchmarks if s in problem.benchmarks]
    stand_ins = [s for s in problem.cpu_benchmarks if s not in problem.benchmarks]
    n = len(problem.benchmarks)
    if len(own) == n and not stand_ins:
        return ""
    if own:
        said = f"{len(own)} of {_count(n, 'benchmark shape')} timed"
    else:
        said = "the benchmark shape not checked or timed" if n == 1 else \
            f"none of the {n} benchmark shapes checked or timed"
    if stand_ins:
        from_tests = sum(s in problem.tests for s in stand_ins)
        kind = ("test shape" if from_tests == len(stand_ins) else "CPU-only shape" if not from_tests
                else "stand-in shape")
        said += f" ({_named(stand_ins, kind)} timed in their place)"
    return said


def interpreter_coverage(problem: Problem, which: str) -> Coverage:
    """What a judgement of `which` shapes ("tests", "benchmarks" or "all") under the interpreter
    covers of `problem`'s own lists."""
    parts = [_tests_part(problem) if which in ("tests", "all") else "",
             _benchmarks_part(problem) if which in ("benchmarks", "all") else ""]
    parts = [p for p in parts if p]
    stand_in = any(s not in problem.benchmarks for s in problem.cpu_benchmarks)
    return Coverage(said="CPU interpreter: " + "; ".join(parts) if parts else "",
                    timed_noun="CPU shape" if stand_in else "benchmark shape")
