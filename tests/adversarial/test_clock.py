"""Bending the clock: replacing what the harness measures with, at import or in the middle of timing.

The harness binds its clocks and records the identity of every primitive it relies on before
the candidate's first line; after the import and after every call it looks again, and any
replacement ends the evaluation as `rejected`.
"""

import pytest

from kscience.evaluate.result import REJECTED

_PATCHES = {
    "time.perf_counter": "import time\ntime.perf_counter = lambda: 0.0",
    "time.monotonic": "import time\ntime.monotonic = lambda: 0.0",
    "torch.cuda.synchronize": "torch.cuda.synchronize = lambda *a, **k: None",
    "torch.cuda.Event": "torch.cuda.Event = object",
    "torch.cuda.Event.elapsed_time": "torch.cuda.Event.elapsed_time = lambda self, end: 0.001",
    "torch.Tensor.clone": "torch.Tensor.clone = lambda self, *a, **k: self",
    "kscience.evaluate.worker.timing._perf_counter":
        "import kscience.evaluate.worker.timing as harness_timing\nharness_timing._perf_counter = lambda: 0.0",
    "Harness._verify":
        "import kscience.evaluate.worker.harness as h\nh.Harness._verify = lambda self: None",
    "Integrity.violation":
        "import kscience.evaluate.worker.integrity as i\ni.Integrity.violation = lambda self: None",
    "kscience.evaluate.wire.send_json":
        "import kscience.evaluate.wire as w\n_real = w.send_json\nw.send_json = lambda ch, obj, *a: _real(ch, obj, *a)",
}


@pytest.mark.parametrize("target", sorted(_PATCHES))
def test_replacing_a_timing_primitive_at_import_is_rejected(judge, target):
    result = judge(_PATCHES[target], """
        def custom_kernel(data):
            return honest(data[0])
        """)
    assert result.status == REJECTED, result.message
    assert target in result.message


def test_replacing_the_clock_in_the_middle_of_timing_is_rejected(judge):
    # Honest through the check calls; from the first timed call on, the host clock crawls.
    result = judge("""
        import time

        _calls, _real = [], time.perf_counter

        def custom_kernel(data):
            _calls.append(1)
            if len(_calls) == 6:
                time.perf_counter = lambda: _real() / 1000
            return honest(data[0])
        """, shapes="all")
    assert result.status == REJECTED, result.message
    assert "time.perf_counter" in result.message


def test_a_profile_hook_is_rejected(judge):
    result = judge("""
        import sys

        sys.setprofile(lambda frame, event, arg: None)

        def custom_kernel(data):
            return honest(data[0])
        """)
    assert result.status == REJECTED, result.message
    assert "profile" in result.message


def test_a_torch_function_mode_left_active_is_rejected(judge):
    # A mode would see, and could rewrite, every torch call the harness makes after the candidate's.
    result = judge("""
        from torch.overrides import TorchFunctionMode

        class Spy(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        Spy().__enter__()

        def custom_kernel(data):
            return honest(data[0])
        """)
    assert result.status == REJECTED, result.message
    assert "mode" in result.message
