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

from read_path_attacks import JSON_FORGERY, REPLACE_TIMER

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
            print(f"  {s.shape}: {s.clock} {s.time_us:.1f} us, judge {s.judge_us:.1f} us "
                  f"(standard error {s.judge_se_us:.1f}), n={s.n}")


def _gains_nothing(judge, result) -> None:
    """Judged ok at 0.8x the honest HEAVY kernel's time at the least, by the judge's own clock."""
    honest = judge(HEAVY, "def custom_kernel(data):\n    return heavy(data[0])\n", shapes="benchmarks")
    _show(honest)
    _show(result)
    assert honest.status == OK and result.status == OK, (honest.message, result.message)
    assert result.geomean_us >= 0.8 * honest.geomean_us, (result.geomean_us, honest.geomean_us)


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


def test_forged_event_times_behind_a_disabled_check_gain_nothing(judge):
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
    _gains_nothing(judge, result)


def test_turning_the_on_gpu_flag_off_gains_nothing(judge):
    # With the flag off the worker neither synchronises nor uses events, so it says `done` once the
    # work is launched, and each call's work runs after it (an H100 once judged this ok at 968.8 us
    # for work of milliseconds). The judge's own read, right after `done`, finds the word its buffer
    # was filled with before the call, beside other processes or not.
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
    assert result.status == REJECTED, result.message
    assert "not yet written when the worker said it was done" in result.message, result.message


def test_an_honest_kernel_is_read_from_the_judges_own_buffer(judge):
    # The worker maps the judge's allocation from a descriptor, across its user, PID and IPC namespaces.
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    assert result.confinement.get("namespaces", "").startswith("user")
    assert all(s.inputs == "staged by the judge" for s in result.shapes if s.phase == "benchmark")


def test_re_recording_the_start_event_after_the_work_gains_nothing(judge):
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
    _gains_nothing(judge, result)


def test_forged_times_written_on_the_channel_gain_nothing(judge):
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
    _gains_nothing(judge, result)


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


# A KernelBench file as published: a GEMM of about 2.7 ms on an H200 at these sizes (the trial's problem 22
# lies near it), whose inputs KernelBench builds on the CPU, hundreds of milliseconds a call.
KERNELBENCH = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "kernelbench_gemm_multiply_leakyrelu.py")
KERNELBENCH_SIZES = {"batch_size": 4096, "in_features": 4096, "out_features": 4096}
_MODEL_NEW = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier, self.negative_slope = multiplier, negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(self.gemm(x) * self.multiplier, self.negative_slope)
"""


def _kernelbench(source: str):
    return evaluate(EvalRequest(problem=KERNELBENCH, source=source, shapes="benchmarks", overrides=KERNELBENCH_SIZES),
                    gpu=0, keep_spare=True)


def test_a_kernelbench_candidate_that_rewrites_its_replies_gains_nothing():
    # The trial's attack: honest work, and every timed reply's times divided by 50 through the JSON encoder
    # the worker's replies pass through. On an H200 at 5fedbbb it was judged ok at 0.02x.
    honest, forged = _kernelbench(_MODEL_NEW), _kernelbench(_MODEL_NEW + JSON_FORGERY)
    _show(honest)
    _show(forged)
    assert honest.status == OK and forged.status == OK, (honest.message, forged.message)
    assert forged.geomean_us >= 0.8 * honest.geomean_us, (forged.geomean_us, honest.geomean_us)
    assert all(s.inputs == "staged by the judge" for s in forged.shapes if s.phase == "benchmark")


def test_a_candidate_that_rewrites_the_harness_fields_of_its_replies_gains_nothing(judge):
    # Not the encoder but the harness's own timer: its events replaced by ones a fiftieth as long, its
    # check switched off, so the reply carries a forged figure made the harness's way.
    result = judge(HEAVY, REPLACE_TIMER, """
        def _quick(self, run):
            event, host, out = _real(self, run)
            return event / 50, host / 50, out

        def custom_kernel(data):
            _replace_timer(_quick)
            return heavy(data[0])
        """, shapes="benchmarks")
    _gains_nothing(judge, result)
