"""A Problem carries only the fields `spec.Problem` declares: whatever loads it (a built-in folder, a
KernelBench file, a GPU MODE directory) may not attach more, so every reader sees what a problem holds
and `dataclasses.replace` (the judge's copies of a problem) keeps all of it."""

import dataclasses
from pathlib import Path

import pytest

from kscience.problems import Problem, builtin_names, load_problem

DATA = Path(__file__).parent / "data"
KERNELBENCH_FILES = sorted(f for f in DATA.glob("kernelbench_*.py") if not f.stem.endswith("_new"))  # not candidates
GPUMODE_DIRS = sorted(task.parent for task in (DATA / "gpumode").rglob("task.yml"))


@pytest.mark.usefixtures("gpumode_modules")
@pytest.mark.parametrize("locator", [*builtin_names(), *KERNELBENCH_FILES, *GPUMODE_DIRS],
                         ids=lambda x: x if isinstance(x, str) else str(Path(x).relative_to(DATA)))
def test_every_sample_problem_holds_its_declared_fields_and_takes_no_other(locator):
    problem = load_problem(str(locator))
    declared = {f.name for f in dataclasses.fields(Problem)}
    assert not hasattr(problem, "__dict__"), f"undeclared attributes: {sorted(set(vars(problem)) - declared)}"
    with pytest.raises(AttributeError):
        problem.attached_later = True


def test_a_copy_of_a_kernelbench_problem_keeps_what_builds_its_models():
    problem = load_problem(str(KERNELBENCH_FILES[0]))
    copy = dataclasses.replace(problem, ref_kernel=lambda data: None)
    assert problem.make_model is not None and problem.reference_model_class is not None
    for name in ("make_model", "reference_model_class", "weights_seed", "source_text", "constants"):
        assert getattr(copy, name) is getattr(problem, name)


def test_problems_of_other_formats_declare_no_kernelbench_model():
    problem = load_problem("softmax")
    assert (problem.source_text, problem.constants, problem.make_model, problem.reference_model_class) == \
        (None, {}, None, None)
