"""Test-wide settings: without a CUDA device, kernels run under the Triton interpreter."""

import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("KSCIENCE_DEVICE", "cpu")
# Keep compiled-kernel caches of test runs out of the user's home.
os.environ.setdefault("KSCIENCE_CACHE", os.path.join(os.path.dirname(__file__), "..", ".kscience", "cache"))


@pytest.fixture(autouse=True)
def own_baseline_cache(tmp_path, monkeypatch):
    """Each test keeps torch.compile's verdicts apart (kscience.run.baseline_cache), so no test reuses a
    baseline another one timed."""
    from kscience.run import baseline_cache
    monkeypatch.setattr(baseline_cache, "cache_dir", lambda: tmp_path / "baseline-cache")


@pytest.fixture
def gpumode_modules():
    """GPU MODE helpers are registered as `task` and `utils`; put back what was there."""
    saved = {name: sys.modules.get(name) for name in ("task", "utils")}
    yield
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
