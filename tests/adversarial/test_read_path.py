"""What happens between a timed call's return and the judge's read of its output.

The bytes the judge checks must be those that existed when the call returned. A candidate that
returns an unwritten buffer and arranges for the answer to be computed while the output is read
(by code of its own that the harness runs on the way: the harness object's own methods, replaced
on the instance; a device it reports for its output, so the judge asks the worker instead of
reading itself) must gain nothing. So must memory that blocks the judge's read for ever, and an
input handed back as the output of a timed call.
"""

import threading
import types

import pytest
from read_path_attacks import ANSWER_ELSEWHERE, ANSWER_IN_SYNC, FIND, USERFAULTFD

from kscience.evaluate.judge import drive, peek
from kscience.evaluate.result import OK, REJECTED, WRONG_ANSWER


def test_an_answer_computed_in_the_harness_sync_while_the_worker_is_read_is_wrong(judge, monkeypatch):
    # The worker's own read path (the GPU's, and the CPU's where the kernel refuses the judge's reads).
    monkeypatch.setattr(peek, "can_read", lambda pid: False)
    result = judge(ANSWER_IN_SYNC, shapes="benchmarks")
    assert not result.device.get("judge_reads")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_an_output_that_claims_another_device_is_still_read_by_the_judge(judge):
    result = judge(ANSWER_ELSEWHERE, shapes="benchmarks")
    assert result.device.get("judge_reads"), "the judge could not read the worker's memory on this machine"
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_a_reported_device_that_is_not_the_evaluations_is_refused():
    # Whatever the worker says, the judge picks how it reads, and an output elsewhere is no answer.
    session = types.SimpleNamespace(device=types.SimpleNamespace(torch_device="cpu"), peek_pid=None)
    where = {"device": "meta", "dtype": "bfloat16", "shape": [4, 4], "strides": [4, 1], "ptr": 4096}
    with pytest.raises(drive.Unreadable, match="lies on meta, not on cpu"):
        drive._read(session, {}, where, seed=1, kind="timed", cap=1 << 20)


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


@pytest.fixture
def reads_never_return(monkeypatch):
    """Every read of the worker's memory longer than `can_read`'s one byte blocks until the test
    ends, as a read of memory registered with userfaultfd does; reads get a one-second deadline."""
    release = threading.Event()
    real = peek._copy_out

    def blocked(pid, ptr, span):
        if span > 1:
            release.wait()
            return None
        return real(pid, ptr, span)

    monkeypatch.setattr(peek, "_copy_out", blocked)
    monkeypatch.setattr(peek, "READ_S", 1.0)
    yield
    release.set()


def test_a_read_of_the_worker_that_never_returns_is_a_verdict_within_the_limit(judge, reads_never_return):
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.device.get("judge_reads")
    assert result.status == REJECTED, result.message
    assert "did not finish" in result.message
    assert result.wall_s < 120


def test_a_stuck_first_look_at_the_worker_is_a_verdict(judge, monkeypatch):
    release = threading.Event()

    def blocked(pid, ptr, span):
        release.wait()

    monkeypatch.setattr(peek, "_copy_out", blocked)
    monkeypatch.setattr(peek, "READ_S", 1.0)
    try:
        result = judge("""
            def custom_kernel(data):
                return honest(data[0])
            """, shapes="tests")
    finally:
        release.set()
    assert result.status == REJECTED, result.message
    assert "did not finish" in result.message


def test_honest_kernels_are_still_ok_on_both_read_paths(judge, monkeypatch):
    source = """
        def custom_kernel(data):
            return honest(data[0])
        """
    assert judge(source, shapes="benchmarks").status == OK
    monkeypatch.setattr(peek, "can_read", lambda pid: False)
    result = judge(source, shapes="benchmarks")
    assert result.status == OK, result.message


def test_memory_registered_with_userfaultfd_does_not_hang_the_judge(judge, monkeypatch):
    import ctypes
    import os

    if os.uname().machine != "x86_64" or ctypes.CDLL(None, use_errno=True).syscall(323, os.O_CLOEXEC) < 0:
        pytest.skip("no full userfaultfd for this process")
    monkeypatch.setattr(peek, "READ_S", 2.0)
    result = judge(FIND, USERFAULTFD, shapes="benchmarks")
    if "USERFAULTFD UNAVAILABLE" in result.stdout_tail:
        pytest.skip("the sandbox keeps the candidate from creating a full userfaultfd")
    assert result.status == REJECTED, result.message
    assert "did not finish" in result.message


def test_a_worker_that_cannot_all_be_stopped_is_not_read(judge, monkeypatch):
    # The judge reads only a worker it has stopped whole: else a process the candidate left
    # running could write the output while it is read.
    from kscience.evaluate.sandbox.workers import Worker

    real = Worker.freeze
    monkeypatch.setattr(Worker, "freeze", lambda self, keep_serving=False, thorough=False:
                        real(self, keep_serving, thorough) and keep_serving)
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == REJECTED, result.message
    assert "could not all be stopped" in result.message


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
