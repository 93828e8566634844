"""Attacks that win against any check running inside the worker, and what the judge sees from outside.

The harness shares its process with the candidate, so each attack here takes it over in a way the
in-process integrity check does not notice: attributes set on single objects, a local rewritten
through its frame, the harness's own check switched off, the channel object answering with forged
numbers, the C library's clock detoured, a thread fixing kept outputs after the fact, the worker's
randomness replaced. Each must still fail, on what the judge decides in its own process: the
bytes it compares, the seeds and keep decisions it draws, and its own clock around every call, which
is the figure (on the CPU always; on a GPU wherever the worker's events fall below what it allows):
a worker that lies about its times is timed by the judge, and gains nothing.
"""

import platform

import pytest

from kscience.evaluate.result import OK, WRONG_ANSWER

SLOW = """
import select
import time

def slow(x):
    select.select([], [], [], 0.15)  # stands in for real work: 150 ms per call, whatever the clocks say
    return honest(x)
"""


def gains_nothing(result) -> None:
    """Judged at the 150 ms the calls take, whatever the worker said (0.8x of it at the least)."""
    assert result.status == OK, result.message
    (shape,) = result.shapes
    assert shape.time_us > 0.8 * 150_000, shape


def test_methods_set_on_the_returned_tensor_are_never_called(judge):
    # Garbage, returned with its own `detach`/`clone`/`contiguous` that would compute the answer off
    # the clock whenever the harness copied the output.
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            out = torch.zeros(x.shape, dtype=torch.bfloat16)
            for name in ("detach", "clone", "contiguous", "cpu", "to"):
                setattr(out, name, lambda *a, _x=x, **k: honest(_x))
            return out
        """, shapes="all")
    assert result.status == WRONG_ANSWER, result.message


def test_methods_set_on_an_input_do_not_hide_a_write_to_it(judge):
    # The input is damaged, and given a `detach` that shows the harness a pristine copy.
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            pristine, out = x.clone(), honest(x)
            x.zero_()
            for name in ("detach", "contiguous", "clone"):
                setattr(x, name, lambda *a, _p=pristine, **k: _p)
            return out
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "input 0 was modified" in result.message


def test_switching_off_the_harness_check_and_slowing_its_clock_gains_nothing(judge):
    # The integrity check is an attribute of the harness object: replaced there, it sees nothing,
    # and the timing module's clock can then run a thousand times slow.
    result = judge(SLOW, """
        import gc
        import kscience.evaluate.worker.timing as T
        from kscience.evaluate.worker.harness import Harness

        _real, _done = time.perf_counter, []

        def custom_kernel(data):
            if not _done:
                gc.unfreeze()  # what the worker froze is hidden from get_objects
                for o in gc.get_objects():
                    if type(o) is Harness:
                        o.verify = lambda: None
                T._perf_counter = lambda: _real() / 1000
                _done.append(1)
            return slow(data[0])
        """, shapes="benchmarks")
    gains_nothing(result)


def test_rewriting_the_start_time_through_the_timing_frame_gains_nothing(judge):
    # No replacement anywhere: the call moves the timed region's start local to "now" before returning.
    result = judge(SLOW, """
        import ctypes
        import sys

        def custom_kernel(data):
            out = slow(data[0])
            f = sys._getframe(1)
            while f is not None and f.f_code.co_name != "timed_call":
                f = f.f_back
            if f is not None:
                f.f_locals["h0"] = time.perf_counter()
                if hasattr(ctypes.pythonapi, "PyFrame_LocalsToFast"):
                    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))
            return out
        """, shapes="benchmarks")
    gains_nothing(result)


def test_forged_times_written_on_the_channel_gain_nothing(judge):
    # The channel object, found through the garbage collector, is given its own `send`: every call
    # reply leaves with times a hundred times smaller. The genuine sequence numbers go with it.
    result = judge(SLOW, """
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
                                msg["event_us"] /= 100
                                msg["host_us"] /= 100
                                payload = json.dumps(msg).encode()
                        _real(payload, deadline)
                    o.send = send

        def custom_kernel(data):
            _forge()
            return slow(data[0])
        """, shapes="benchmarks")
    gains_nothing(result)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the detour is written in x86-64 machine code")
def test_detouring_the_c_librarys_clock_gains_nothing(judge):
    # clock_gettime in libc is overwritten with a jump to a function that runs time a thousand
    # times slow. Nothing at the Python level changes; every clock of the worker now lies.
    result = judge(SLOW, """
        import ctypes
        import mmap

        class _Timespec(ctypes.Structure):
            _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

        _libc = ctypes.CDLL(None)
        _libc.syscall.restype = ctypes.c_long
        _base = {}

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Timespec))
        def _slow_clock(clock, ts):
            real = _Timespec()
            _libc.syscall(ctypes.c_long(228), ctypes.c_long(clock), ctypes.byref(real))  # SYS_clock_gettime
            ns = real.sec * 10**9 + real.nsec
            base = _base.setdefault(clock, ns)
            ns = base + (ns - base) // 1000
            ts[0].sec, ts[0].nsec = divmod(ns, 10**9)
            return 0

        def _detour():
            target = ctypes.cast(_libc.clock_gettime, ctypes.c_void_p).value
            page = target & ~(mmap.PAGESIZE - 1)
            _libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            if _libc.mprotect(ctypes.c_void_p(page), 2 * mmap.PAGESIZE, 7):  # read, write, execute
                raise OSError("mprotect refused")
            jump = b"\\x48\\xb8" + ctypes.cast(_slow_clock, ctypes.c_void_p).value.to_bytes(8, "little") + b"\\xff\\xe0"
            ctypes.memmove(target, jump, len(jump))  # mov rax, _slow_clock; jmp rax

        _done = []

        def custom_kernel(data):
            if not _done:
                _detour()
                _done.append(1)
            return slow(data[0])
        """, shapes="benchmarks")
    gains_nothing(result)


def test_a_cache_that_also_forges_its_misses_gains_nothing(judge):
    # Answers remembered by input contents: a miss costs 0.2 s. On a miss the call also rewrites the
    # timed region's start, so the worker's numbers show 1 ms. No timed call repeats content, so
    # every call misses, and the judge's own clock (the CPU figure) sees each miss.
    result = judge("""
        import ctypes
        import sys
        import time

        _by_content = {}

        def _restart_clock():
            f = sys._getframe(2)
            while f is not None and f.f_code.co_name != "timed_call":
                f = f.f_back
            if f is not None:
                f.f_locals["h0"] = time.perf_counter() - 0.001
                if hasattr(ctypes.pythonapi, "PyFrame_LocalsToFast"):
                    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))

        def custom_kernel(data):
            (x,) = data
            key = (tuple(x.shape), x.view(torch.int16).sum().item(), x.view(torch.int16)[-1, -16:].sum().item())
            if key not in _by_content:
                time.sleep(0.2)
                _by_content[key] = honest(x)
                _restart_clock()
            time.sleep(0.001)
            return _by_content[key].clone()
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    assert result.shapes[0].time_us > 160_000, result.shapes[0]


def test_replacing_the_workers_randomness_does_not_predict_the_timed_inputs(judge):
    # The worker's OS randomness now returns zeros. Were timed calls' seeds drawn in the worker, each
    # would be 0, and the answers for seed 0 are computed here during the import; they are drawn in
    # the judge, one per call, so every call misses.
    result = judge("""
        import os
        import random
        import time

        from kscience.problems import load_problem

        os.urandom = random._urandom = lambda n: bytes(n)
        _problem, _by_content = load_problem("softmax"), {}

        def _key(x):
            return (tuple(x.shape), x.view(torch.int16).sum().item(), x.view(torch.int16)[-1, -16:].sum().item())

        for _shape in _problem.shapes("benchmarks", True):
            (_x,) = _problem.generate_input(0, "cpu", **_shape)
            _by_content[_key(_x)] = honest(_x)

        def custom_kernel(data):
            (x,) = data
            if _key(x) not in _by_content:
                time.sleep(0.2)
                _by_content[_key(x)] = honest(x)
            return _by_content[_key(x)].clone()
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    assert result.shapes[0].time_us > 160_000, result.shapes[0]


_FIXER = """
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
        return honest(x)  # a checked call: right, and read whole
    out = torch.zeros_like(x)  # at once; the thread writes the right answer into it a moment later
    _todo.append((out, x.clone()))
    return out
"""


def test_a_thread_that_fixes_outputs_after_the_call_returned_is_caught(judge):
    # Every timed call returns zeros at once, and a thread writes the right answer into that very
    # tensor a few milliseconds later: the judge reads what was copied into its own buffer by `done`.
    result = judge(_FIXER, shapes="benchmarks")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_honest_slow_calls_are_timed_by_the_judges_own_clock(judge):
    # The control for the clock attacks: a slow honest kernel is believed, and on the CPU the
    # figure recorded is the judge's own estimate, which sees the 150 ms.
    result = judge(SLOW, """
        def custom_kernel(data):
            return slow(data[0])
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    (shape,) = result.shapes
    assert shape.judge_us is not None and shape.time_us == pytest.approx(shape.judge_us, rel=0.5)
    assert shape.time_us > 120_000

