"""On a GPU: attacks that take the worker over, against what the judge sees from outside, and the
honest kernels that must stay `ok` (among them the fp8 seed at NUM_STAGES = 3, once rejected as a
cache on an H100). Attacks that no longer gain anything are judged at their honest speed. Run: `pytest -s tests/gpu/test_gpu_outside.py` (the -s shows the judge's own
estimate beside the events for the honest kernels)."""

import dataclasses

import pytest
import torch

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import OK, REJECTED, WRONG_ANSWER, EvalRequest
from kscience.problems import load_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

# Real work worth a millisecond or more per call on the softmax benchmark shapes.
HEAVY = """
def heavy(x):
    for _ in range(40):
        y = honest(x)
    return y
"""


def _show(result) -> None:
    for s in result.shapes:
        if s.time_us:
            print(f"  {s.shape}: events {s.time_us:.1f} us, judge {s.judge_us:.1f} us, n={s.n}")


def test_methods_set_on_the_returned_tensor_are_never_called(judge):
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            out = torch.zeros_like(x)
            for name in ("detach", "clone", "contiguous", "cpu", "to"):
                setattr(out, name, lambda *a, _x=x, **k: honest(_x))
            return out
        """)
    assert result.status == WRONG_ANSWER, result.message


def test_methods_set_on_an_input_do_not_hide_a_write_to_it(judge):
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            pristine, out = x.clone(), honest(x)
            x.zero_()
            for name in ("detach", "contiguous", "clone"):
                setattr(x, name, lambda *a, _p=pristine, **k: _p)
            return out
        """, shapes="tests")
    assert result.status == WRONG_ANSWER, result.message
    assert "input 0 was modified" in result.message


def test_forged_event_times_behind_a_disabled_check_are_rejected(judge):
    # The harness object's check is replaced, then the CUDA event the worker's modules time with
    # reports a twentieth of every duration (wherever the timed region lives: it moved from
    # timing.py to harness.py on 2026-11-26, and an attack on the old place alone forged nothing).
    result = judge(HEAVY, """
        import gc
        import kscience.evaluate.clocks as C
        import kscience.evaluate.worker.harness as H
        import kscience.evaluate.worker.timing as T
        from kscience.evaluate.worker.harness import Harness

        class _Quick(torch.cuda.Event):
            def elapsed_time(self, end):
                return super().elapsed_time(end) / 20

        _done = []

        def custom_kernel(data):
            if not _done:
                gc.unfreeze()  # what the worker froze is hidden from get_objects
                for o in gc.get_objects():
                    if type(o) is Harness:
                        o.verify = lambda: None
                for module in (C, H, T):
                    if hasattr(module, "_Event"):
                        module._Event = _Quick
                _done.append(1)
            return heavy(data[0])
        """, shapes="benchmarks")
    assert result.status == REJECTED, result.message


def test_turning_the_on_gpu_flag_off_gains_nothing(judge):
    # With the flag off the worker neither synchronises nor uses events, so its clock sees only
    # launches and each call's work runs after its reply. Before the judge read timed outputs from
    # a buffer of its own, that work landed in later brackets or in the worker's copy for the
    # judge's read: an H100 judged this ok at 968.8 us for work of milliseconds. Now the judge's own
    # read, right after the reply, finds the word its buffer was filled with before the call, beside
    # other processes or not.
    result = judge(HEAVY, """
        import gc
        from kscience.evaluate.worker.harness import Harness

        _done = []

        def custom_kernel(data):
            out = heavy(data[0])
            if not _done:
                gc.unfreeze()  # what the worker froze is hidden from get_objects
                for o in gc.get_objects():
                    if type(o) is Harness:
                        o.verify = lambda: None
                        o.on_gpu = False
                _done.append(1)
            return out
        """, shapes="benchmarks")
    _show(result)
    assert result.device.get("judge_reads"), "the driver could not share the judge's output buffer here"
    assert result.status == REJECTED, result.message
    assert "not yet written when its reply came" in result.message, result.message


def test_an_honest_kernel_is_read_from_the_judges_own_buffer(judge):
    # The worker maps the judge's allocation from a descriptor, across its user, PID and IPC namespaces.
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    assert result.device.get("judge_reads") and result.confinement.get("namespaces", "").startswith("user")


def test_re_recording_the_start_event_after_the_work_is_rejected(judge):
    result = judge(HEAVY, """
        import sys

        def custom_kernel(data):
            out = heavy(data[0])
            f = sys._getframe(1)
            while f is not None and "start" not in f.f_locals:  # the frame that holds the start event
                f = f.f_back
            if f is not None:
                f.f_locals["start"].record()
            return out
        """, shapes="benchmarks")
    assert result.status == REJECTED, result.message


def test_forged_times_written_on_the_channel_are_rejected(judge):
    result = judge(HEAVY, """
        import gc
        import json
        from kscience.evaluate.wire import Channel

        def _forge():
            gc.unfreeze()  # what the worker froze is hidden from get_objects
            for o in gc.get_objects():
                if type(o) is Channel and "send" not in vars(o):
                    def send(payload, deadline=float("inf"), _real=o.send):
                        if len(payload) < 4096:
                            try:
                                msg = json.loads(bytes(payload))
                            except ValueError:
                                msg = None
                            if isinstance(msg, dict) and "event_us" in msg:
                                msg["event_us"] /= 20
                                msg["host_us"] /= 20
                                payload = json.dumps(msg).encode()
                        _real(payload, deadline)
                    o.send = send

        def custom_kernel(data):
            _forge()
            return heavy(data[0])
        """, shapes="benchmarks")
    assert result.status == REJECTED, result.message
    assert "judge's own clock" in result.message


def test_replacing_the_workers_randomness_does_not_predict_the_timed_inputs(judge):
    # Answers for seed 0 precomputed at import, with the worker's randomness returning zeros: the
    # seeds of timed calls are drawn in the judge, one per call, so every call misses and runs
    # HEAVY (a millisecond or more; a hit would be a copy, tens of microseconds).
    result = judge(HEAVY, """
        import os
        import random

        from kscience.problems import load_problem

        os.urandom = random._urandom = lambda n: bytes(n)
        _problem, _by_content = load_problem("softmax"), {}

        def _key(x):
            return (tuple(x.shape), x.view(torch.int16).sum().item(), x.view(torch.int16)[-1, -16:].sum().item())

        for _shape in _problem.shapes("benchmarks", False):
            (_x,) = _problem.generate_input(0, "cuda", **_shape)
            _by_content[_key(_x)] = honest(_x)

        def custom_kernel(data):
            (x,) = data
            k = _key(x)
            if k not in _by_content:
                _by_content[k] = heavy(x)
            return _by_content[k].clone()
        """, shapes="benchmarks")
    _show(result)
    assert result.status == OK, result.message
    assert all(s.time_us > 500 for s in result.shapes), [s.time_us for s in result.shapes]


def test_a_thread_that_fixes_outputs_after_the_call_returned_is_caught(judge):
    result = judge("""
        import sys
        import threading
        import time

        from kscience.evaluate.worker.timing import Timer

        _todo = []

        def _fixer():
            while True:
                while _todo:
                    out, x = _todo.pop()
                    out.copy_(honest(x))
                time.sleep(0.002)

        threading.Thread(target=_fixer, daemon=True).start()

        def custom_kernel(data):
            (x,) = data
            f = sys._getframe(1)
            while f is not None and type(f.f_locals.get("self")) is not Timer:
                f = f.f_back
            if f is None:
                return honest(x)
            out = torch.zeros_like(x)
            _todo.append((out, x.clone()))
            return out
        """, shapes="benchmarks")
    assert result.status in (WRONG_ANSWER, REJECTED), result.message


def test_honest_heavy_pytorch_is_ok_and_the_judges_clock_agrees(judge):
    result = judge(HEAVY, """
        def custom_kernel(data):
            return heavy(data[0])
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    _show(result)
    for s in result.shapes:
        assert s.judge_us == pytest.approx(s.time_us, rel=0.25)


# A layout probe around the fp8 seed: every call of a shape must see the same strides, storage
# offsets, 16-byte alignment and contiguity, and every timed call the same tensors.
_FP8_LAYOUT_PROBE = """

_seed_kernel = custom_kernel
_layouts, _addresses = {}, {}


def custom_kernel(data):
    key = tuple(tuple(t.shape) for t in data)
    layout = [(t.stride(), t.storage_offset(), t.data_ptr() % 16, t.is_contiguous()) for t in data]
    if _layouts.setdefault(key, layout) != layout:
        raise RuntimeError(f"input layout changed between calls: {_layouts[key]} then {layout}")
    _addresses.setdefault(key, set()).add(tuple(t.data_ptr() for t in data))
    if len(_addresses[key]) > 2:
        raise RuntimeError("timed calls got inputs at different addresses")
    return _seed_kernel(data)
"""


@pytest.mark.parametrize("stages", [3, 4])
def test_the_fp8_seed_is_ok_at_every_pipeline_depth(stages):
    # On an H100 the seed at NUM_STAGES = 3 was rejected as a cache: 138.8 us on inputs seen before,
    # at least 1392 us on fresh ones, at m=1024, n=7168, k=2048. Every timed call now has new
    # inputs in the same buffers, and there is no cache check left to be fooled.
    problem = load_problem("fp8_blockscale_gemm")
    source = problem.seed_source.replace("NUM_STAGES = 4", f"NUM_STAGES = {stages}")
    assert f"NUM_STAGES = {stages}" in source
    shapes = [{"m": 1024, "n": 7168, "k": 2048}] + [s for s in problem.benchmarks if s["m"] == 6144][:2]
    problem = dataclasses.replace(problem, benchmarks=shapes)
    result = evaluate(EvalRequest(problem="fp8_blockscale_gemm", source=source + _FP8_LAYOUT_PROBE,
                                  shapes="benchmarks"), gpu=0, problem=problem, keep_spare=True)
    _show(result)
    assert result.status == OK, result.message
    assert len(result.shapes) == len(shapes)


def test_a_cache_keyed_on_a_strided_sample_gains_nothing_on_the_gpu(judge):
    # The gpu-mode/reference-kernels #162 attack: answers remembered by shape and a strided sample of
    # about 256 elements. No timed call repeats content, so every call misses and runs HEAVY.
    result = judge(HEAVY, """
        _memo = {}

        def custom_kernel(data):
            (x,) = data
            flat = x.reshape(-1)
            key = (tuple(x.shape), tuple(flat[::max(1, flat.numel() // 256)].view(torch.int16).tolist()))
            if key not in _memo:
                _memo[key] = heavy(x)
            return _memo[key].clone()
        """, shapes="benchmarks")
    _show(result)
    assert result.status == OK, result.message
    assert all(s.time_us > 500 for s in result.shapes), [s.time_us for s in result.shapes]


def test_a_twenty_millisecond_kernel_is_ok(judge):
    # GPU MODE's pmpp sort_py reference (about 20 ms a call) was once rejected on an H100 as reusing
    # results: one pair of brackets decided. Long honest calls must be believed.
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            y = honest(x)
            for _ in range(400 * 4096 * 4096 // x.numel()):
                y = honest(x)
            return y
        """, shapes="benchmarks")
    _show(result)
    assert result.status == OK, result.message
    assert all(s.time_us > 5_000 for s in result.shapes), [s.time_us for s in result.shapes]
