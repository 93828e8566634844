"""Finding and loading problems: built-in folders, KernelBench files, GPU MODE directories.

    kind.py            `ProblemKind`: the small interface every problem format answers
    kinds.py           the registry of kinds: which kind a locator names (the one place formats are told apart)
    builtin.py         built-in problems: a folder beside this file with `reference.py` and `seed.py`
    kernelbench.py     KernelBench files: a `Model`, its inputs and constants; the candidate's `ModelNew`
    gpumode.py         GPU MODE directories (gpumode_task.py reads their task.yml)
    spec.py            `Problem`: what every kind loads into, and all the evaluator ever talks to
    bundle.py          a file problem's files (its kind names them), packed to travel with its evaluation requests
    files.py           importing a problem's Python file as a module of its own

The other modules are facts about problems that every kind shares: outputs, precision, roofline floors,
libraries a user would call instead, whether a problem fits this machine (fit.py).
"""

from __future__ import annotations

from kscience.problems.builtin import builtin_names, from_reference_module
from kscience.problems.files import import_file
from kscience.problems.gpumode import probed_facts
from kscience.problems.kinds import kind_for, no_such_problem
from kscience.problems.libraries import Library
from kscience.problems.spec import Problem, ProblemError, Shape, geomean, shape_label

__all__ = ["Problem", "ProblemError", "Shape", "geomean", "shape_label", "builtin_names", "kind_for",
           "load_problem", "loaded_here", "no_such_problem", "import_file", "from_reference_module", "probed_facts",
           "Library"]

_loaded_here: list[str] = []  # the paths of the file problems this process loaded, newest last


def load_problem(locator: str, overrides: dict | None = None, probed: dict | None = None) -> Problem:
    """A built-in name, a KernelBench .py file, or a GPU MODE directory (`probed`: see load_gpumode_dir)."""
    problem = kind_for(locator).load(locator, dict(overrides or {}), probed)
    if not problem.kind.in_package:
        _loaded_here.append(problem.locator)
    return problem


def loaded_here() -> list[str]:
    """The paths of the KernelBench files and GPU MODE directories this process loaded, newest last."""
    return list(_loaded_here)
