"""Building is not running: a compiler running in the worker does not count against the step limit,
up to the build limit; a hang with no compiler keeps the step limit; the profiled pass after the
timed calls keeps the step limit too.

The builds are stood in for by `sleep` run under a compiler's name (the judge knows a compiler by the
name of its process, judge/builds.py), so the tests need no nvcc.
"""

from __future__ import annotations

import shutil

import pytest

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import OK, TIMEOUT, EvalRequest

SLEEP = shutil.which("sleep")
pytestmark = pytest.mark.skipif(SLEEP is None, reason="needs a `sleep` program")

SOFTMAX = """
import torch

def custom_kernel(data):  # softmax from its parts: the problem forbids calling torch.softmax
    x = data[0].float()
    e = (x - x.amax(-1, keepdim=True)).exp()
    return (e / e.sum(-1, keepdim=True)).to(torch.bfloat16)
"""


def building(seconds: float, name: str = "nvcc") -> str:
    """A softmax whose import runs a 'compiler' for `seconds` (sleep, under a compiler's name)."""
    return f"""
import os, subprocess
os.symlink({SLEEP!r}, {name!r})
subprocess.run([os.path.abspath({name!r}), "{seconds}"], check=True)
""" + SOFTMAX


def test_a_build_longer_than_the_step_limit_is_not_a_timeout():
    result = evaluate(EvalRequest(problem="softmax", source=building(6), shapes="tests", step_limit_s=3,
                                  measure=[]))
    assert result.status == OK, result.message
    assert result.build_s >= 3  # the judge saw the compiler for most of its 6 s


def test_the_build_limit_ends_a_build_that_does_not_end():
    result = evaluate(EvalRequest(problem="softmax", source=building(600, "ptxas"), shapes="tests", step_limit_s=4,
                                  build_limit_s=6, measure=[]))
    assert result.status == TIMEOUT
    assert "the 6 s build limit ran out while importing the candidate, with ptxas still running" in result.message
    assert result.wall_s < 60


def test_a_hang_with_no_compiler_keeps_the_step_limit():
    hung = "import time\ntime.sleep(600)\n" + SOFTMAX
    result = evaluate(EvalRequest(problem="softmax", source=hung, shapes="tests", step_limit_s=3, measure=[]))
    assert result.status == TIMEOUT and result.build_s == 0
    assert "the 3 s limit per step set for this evaluation ran out while importing the candidate" in result.message
    assert result.wall_s < 60


def test_the_profiled_calls_after_timing_keep_to_the_step_limit():
    # Honest under the clock, it sleeps only when torch's or Triton's profiler calls it (kernel_times.py).
    slow_when_profiled = SOFTMAX.replace("def custom_kernel(data):\n", """def custom_kernel(data):
    import sys, time
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "record" and "kernel_times" in frame.f_code.co_filename:
            time.sleep(600)
        frame = frame.f_back
""")
    result = evaluate(EvalRequest(problem="softmax", source=slow_when_profiled, shapes="all", step_limit_s=20))
    assert result.status == OK, result.message  # the profiled pass is advice: its failure keeps the verdict
    assert "per-kernel times not taken" in result.kernel_profiler and "20 s limit per step" in result.kernel_profiler
    assert result.phases_s.get("kernels", 0) < 40
