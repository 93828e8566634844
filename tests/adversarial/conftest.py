"""Shared fixtures for hostile candidates. They are judged on the softmax problem, on the CPU
under the Triton interpreter when no GPU is present, with plain PyTorch doing the honest part."""

from __future__ import annotations

import textwrap

import pytest

import kscience.evaluate.judge.session as session_module
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest, EvalResult

# The honest computation (softmax data is `(x,)`, x an [m, n] bf16 matrix), for candidates to build on.
HONEST = """
import torch

def honest(x):  # from its parts: softmax forbids calling torch.softmax
    x = x.float()
    e = (x - x.amax(-1, keepdim=True)).exp()
    return (e / e.sum(-1, keepdim=True)).to(torch.bfloat16)
"""


@pytest.fixture
def judge():
    """judge(*source_parts, shapes="tests", **request fields) -> EvalResult.

    Each part is dedented on its own; HONEST comes first, so candidates can call `honest(x)`.
    """

    def run(*parts: str, shapes: str = "tests", **fields) -> EvalResult:
        source = "\n".join(textwrap.dedent(p) for p in (HONEST,) + parts)
        return evaluate(EvalRequest(problem="softmax", source=source, shapes=shapes, **fields))

    return run


@pytest.fixture
def short_limits(monkeypatch):
    """Phase limits short enough for hang tests, long enough for a worker to start on a busy machine."""
    monkeypatch.setitem(session_module.LIMITS, "import", (15.0, 15.0))
    monkeypatch.setitem(session_module.LIMITS, "check", (6.0, 6.0))
    monkeypatch.setitem(session_module.LIMITS, "time", (20.0, 20.0))

