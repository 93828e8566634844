"""The registry of problem kinds: the one place that tells a built-in name, a KernelBench file and a
GPU MODE directory apart. The loaders, campaigns, the harness, the baselines and the prompts ask it
(or the kind a loaded problem carries, `Problem.kind`). A new format is one module with a
`ProblemKind` subclass and one line in `KINDS` (docs/architecture.md, "Adding a problem kind").
"""

from __future__ import annotations

from kscience.problems import builtin, gpumode, kernelbench
from kscience.problems.kind import ProblemKind
from kscience.problems.spec import ProblemError

# Asked in this order: a built-in's name first, so a file of that name in the working directory does not
# hide it (a KernelBench file and a GPU MODE directory never claim the same path).
KINDS: tuple[ProblemKind, ...] = (builtin.KIND, kernelbench.KIND, gpumode.KIND)


def kind_for(locator: str) -> ProblemKind:
    """The kind whose problem `locator` names; ProblemError (no_such_problem) where none claims it."""
    for kind in KINDS:
        if kind.claims(locator):
            return kind
    raise no_such_problem(locator)


def kind_named(name: str) -> ProblemKind:
    """The kind a stored problem names (`ProblemKind.name`)."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise ProblemError(f"no problem kind {name!r} (kinds: {', '.join(k.name for k in KINDS)})")


def no_such_problem(locator: str) -> ProblemError:
    """The one wording of "this names no problem", for `run`, `eval` and `campaign` alike."""
    names = ", ".join(builtin.builtin_names())
    others = [k.title for k in KINDS if k is not builtin.KIND]
    others = ", ".join(others[:-1]) + " or " + others[-1] if len(others) > 1 else "".join(others)
    return ProblemError(f"no problem {locator!r}: not {builtin.KIND.title} ({names}), {others}")
