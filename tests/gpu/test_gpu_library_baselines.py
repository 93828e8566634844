"""On a real GPU: each library a built-in names (Liger-Kernel, QuACK) is correct through the entry point its
declaration calls, where it is installed (tests/test_library_baselines.py: a kernel that calls one is refused)."""

import re

import pytest
import torch

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import OK, RUNTIME_ERROR, EvalRequest
from kscience.problems import builtin_names, load_problem
from kscience.problems.libraries import missing_line
from kscience.run.baselines import library_candidate

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DECLARED = [(name, lib) for name in builtin_names() for lib in load_problem(name).libraries]


@pytest.mark.parametrize("name,lib", DECLARED, ids=[f"{n}-{lib.name}" for n, lib in DECLARED])
def test_each_library_baseline_is_correct_where_installed(name, lib):
    if missing_line(lib):
        pytest.skip(missing_line(lib))
    problem = load_problem(name)
    result = evaluate(EvalRequest(problem=name, source=library_candidate(lib), shapes="all", baseline=True,
                                  tolerance=problem.tolerance_for("library", lib.title)), gpu=0)
    missing = re.search(r"No module named '([\w.]+)'", result.message)
    if result.status == RUNTIME_ERROR and missing and missing.group(1).split(".")[0] != lib.module.split(".")[0]:
        pytest.skip(f"{lib.title} is installed without what it needs to run here: {result.message}")
    assert result.status == OK, f"{lib.title}: {result.status}: {result.message}"

