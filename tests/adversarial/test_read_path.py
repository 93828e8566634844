"""What happens between a timed call's return and the judge's read of its output.

The worker copies a timed call's output into the judge's own buffer and only then says `done`; the
judge reads its buffer at once, in its own memory. A candidate that returns an unwritten buffer and
arranges for the answer to land later (code of its own that the harness runs on the way, a thread
writing into the judge's buffer after `done`), or that keeps the judge's buffer from being written at
all (a buffer of its own mapped in its place, the copy skipped), must gain nothing: the judge's read
cannot be switched off, and what it finds unwritten is a verdict against the candidate.
"""

import os

import pytest
from read_path_attacks import ANSWER_ELSEWHERE, ANSWER_IN_SYNC, FIND, USERFAULTFD

import kscience.evaluate.judge.session as session_module
from kscience.evaluate.result import CRASHED, OK, REJECTED, TIMEOUT, WRONG_ANSWER

# The harness's own integrity check switched off, as a candidate that knows where it lives can.
NO_CHECK = FIND + """
import gc

def _no_check():
    gc.unfreeze()
    for o in gc.get_objects():
        if type(o) is Harness:
            o.verify = lambda: None
"""


def test_an_answer_computed_in_the_harness_sync_is_wrong(judge):
    result = judge(ANSWER_IN_SYNC, shapes="benchmarks")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_an_output_that_claims_another_device_is_wrong(judge):
    result = judge(ANSWER_ELSEWHERE, shapes="benchmarks")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_a_replaced_fixed_attribute_of_the_harness_is_rejected(judge):
    # Slots fixed once the harness is built (here the outputs it poisons before every call) are
    # checked on the instance, as module globals and class attributes are.
    result = judge(FIND, """
        def custom_kernel(data):
            _harness().outputs = frozenset()
            return honest(data[0])
        """, shapes="tests")
    assert result.status == REJECTED, result.message
    assert "replaced the harness's outputs" in result.message


def test_an_input_handed_back_from_timed_calls_is_wrong(judge):
    # The answer is written over the input and the input returned: right values, no output of its
    # own. Checked calls (where the view would be seen) get a real output.
    result = judge(FIND, """
        def custom_kernel(data):
            (x,) = data
            if not _timed():
                return honest(x)
            return x.copy_(honest(x))
        """, shapes="benchmarks")
    assert result.status == WRONG_ANSWER, result.message
    assert "view of input 0" in result.message


def test_a_buffer_of_the_candidates_own_in_place_of_the_judges_is_found(judge):
    # With the integrity check off, the worker maps a memfd of its own wherever the judge hands it a
    # buffer: the worker's copies go there, the judge's own buffer keeps its fill.
    result = judge(NO_CHECK, """
        import os

        import kscience.evaluate.shared_buffer as S
        import kscience.evaluate.worker.timing as T

        def _private(handed, nbytes, on_device, ordinal, what):
            os.close(S.receive_fd(handed))
            return S.create(nbytes, None)

        def custom_kernel(data):
            _no_check()
            T._map = _private
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == REJECTED, result.message
    assert "not yet written when the worker said it was done" in result.message


def test_skipping_the_copy_into_the_judges_buffer_is_found(judge):
    result = judge(NO_CHECK, """
        import kscience.evaluate.worker.timing as T

        _real = T.Timer.hand_over

        def _skip(self, out):
            if out is None:
                _real(self, out)

        def custom_kernel(data):
            _no_check()
            T.Timer.hand_over = _skip
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == REJECTED, result.message
    assert "not yet written when the worker said it was done" in result.message


def test_an_answer_written_into_the_judges_buffer_after_done_is_too_late(judge):
    # Timed calls return zeros, and a thread writes the right answer straight into the judge's buffer a
    # moment after the worker said it was done.
    result = judge(FIND, """
        import threading
        import time

        def _later(timer, x):
            time.sleep(0.002)
            right = honest(x).view(-1).view(torch.uint8)
            timer.judges.tensor[:right.numel()].copy_(right)

        def custom_kernel(data):
            (x,) = data
            if not _timed():
                return honest(x)
            f = sys._getframe(1)
            while f is not None and type(f.f_locals.get("self")).__name__ != "Timer":
                f = f.f_back
            threading.Thread(target=_later, args=(f.f_locals["self"], x.clone()), daemon=True).start()
            return torch.zeros_like(x)
        """, shapes="benchmarks")
    assert result.status in (WRONG_ANSWER, REJECTED), result.message
    assert "timed call" in result.message


def test_honest_kernels_are_ok_on_the_judges_own_read(judge):
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == OK, result.message
    assert result.shapes[0].inputs == "staged by the judge"


def test_memory_registered_with_userfaultfd_does_not_hang_the_judge(judge, monkeypatch):
    import ctypes

    if os.uname().machine != "x86_64" or ctypes.CDLL(None, use_errno=True).syscall(323, os.O_CLOEXEC) < 0:
        pytest.skip("no full userfaultfd for this process")
    monkeypatch.setitem(session_module.LIMITS, "time", (20.0, 20.0))
    result = judge(FIND, USERFAULTFD, shapes="benchmarks")
    if "USERFAULTFD UNAVAILABLE" in result.stdout_tail:
        pytest.skip("the sandbox keeps the candidate from creating a full userfaultfd")
    assert result.status in (TIMEOUT, CRASHED, REJECTED), result.message
    assert result.wall_s < 120


def test_watching_a_timer_keeps_nothing_of_it_once_it_is_let_go():
    import gc
    import weakref

    from kscience.evaluate.worker.integrity import Integrity

    class Buffers:
        __slots__ = ("work", "__weakref__")

    integrity, held = Integrity([]), Buffers()
    held.work = [1]
    integrity.watch("timer", held, ("work",))
    gone = weakref.ref(held)
    integrity.watch("timer", None, ())
    del held
    gc.collect()
    assert gone() is None and integrity.violation() is None
