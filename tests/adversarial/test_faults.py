"""Faults: hangs, aborts, exits, floods, memory hogs and plain mistakes, each one status.

Nothing a candidate does raises in the caller or hangs it: phase limits end hangs by killing
the whole process group, the worker's death becomes `crashed` with the signal or exit code,
output is drained forever but only its tail kept, and a watchdog caps resident memory.
"""

import pytest

from kscience.evaluate.result import COMPILE_ERROR, CRASHED, OK, RUNTIME_ERROR, TIMEOUT, WRONG_ANSWER
from kscience.evaluate.sandbox.workers import TAIL_BYTES

_OK_CALL = """
def custom_kernel(data):
    return honest(data[0])
"""


def test_a_hang_at_import_times_out(judge, short_limits):
    result = judge("while True:\n    pass\n", _OK_CALL)
    assert result.status == TIMEOUT, result.message
    assert "import" in result.message


def test_a_hang_in_the_call_times_out(judge, short_limits):
    result = judge("""
        import time

        def custom_kernel(data):
            time.sleep(10**6)
        """)
    assert result.status == TIMEOUT, result.message
    assert "check" in result.message


def test_an_infinite_loop_inside_a_triton_kernel_times_out(judge, short_limits):
    result = judge("""
        import triton
        import triton.language as tl

        @triton.jit
        def spin(y_ptr):
            i = 0
            while i >= 0:
                i = i + 1 - 1
            tl.store(y_ptr, i)

        def custom_kernel(data):
            y = torch.empty_like(data[0])
            spin[(1,)](y)
            return y
        """)
    assert result.status == TIMEOUT, result.message
    assert "check" in result.message


@pytest.mark.parametrize("how, signal_name", [("os.abort()", "SIGABRT"),
                                              ("ctypes.string_at(0)", "SIGSEGV")])
def test_a_fatal_signal_is_a_crash(judge, how, signal_name):
    result = judge(f"""
        import ctypes
        import os

        def custom_kernel(data):
            {how}
        """)
    assert result.status == CRASHED, result.message
    assert signal_name in result.message


@pytest.mark.parametrize("where, status, words", [("import", COMPILE_ERROR, "SystemExit"),
                                                  ("call", RUNTIME_ERROR, "SystemExit")])
def test_sys_exit_is_an_error_not_an_exit(judge, where, status, words):
    exit_at_import = "import sys\nsys.exit(3)\n" if where == "import" else "import sys\n"
    result = judge(exit_at_import, """
        def custom_kernel(data):
            sys.exit(4)
        """)
    assert result.status == status, result.message
    assert words in result.message


@pytest.mark.parametrize("where, code", [("import", 3), ("call", 0)])
def test_os_exit_is_a_crash(judge, where, code):
    at_import = f"import os\nos._exit({code})\n" if where == "import" else "import os\n"
    result = judge(at_import, f"""
        def custom_kernel(data):
            os._exit({code})
        """)
    assert result.status == CRASHED, result.message
    assert f"exited with code {code}" in result.message


def test_stdout_and_stderr_floods_keep_only_a_tail(judge):
    result = judge("""
        import sys

        for _ in range(2000):
            print("x" * 10_000)
            print("y" * 10_000, file=sys.stderr)

        def custom_kernel(data):
            print("z" * 1_000_000)
            return honest(data[0])
        """)
    assert result.status == OK, result.message
    for tail in (result.stdout_tail, result.stderr_tail):
        assert len(tail) < TAIL_BYTES + 100
        assert "earlier bytes dropped" in tail


def test_a_host_memory_hog_is_killed(judge, monkeypatch):
    monkeypatch.setenv("KSCIENCE_WORKER_RSS_BYTES", str(3 * 2**30 // 2))
    result = judge("""
        import time

        hoard = []
        for _ in range(160):  # up to 10 GiB, 64 MiB at a time
            hoard.append(torch.ones(2**24))
            time.sleep(0.02)
        """, _OK_CALL)
    assert result.status == CRASHED, result.message
    assert "memory" in result.message


def test_a_syntax_error_is_a_compile_error(judge):
    result = judge("def custom_kernel(data)\n    return data[0]\n")
    assert result.status == COMPILE_ERROR, result.message
    assert "SyntaxError" in result.message


def test_a_missing_entry_point_is_a_compile_error(judge):
    result = judge("def kernel(data):\n    return honest(data[0])\n")
    assert result.status == COMPILE_ERROR, result.message
    assert "custom_kernel" in result.message


def test_an_exception_is_a_runtime_error_with_its_line(judge):
    result = judge("""
        def custom_kernel(data):
            raise ValueError("no kernel today")
        """)
    assert result.status == RUNTIME_ERROR, result.message
    assert "ValueError: no kernel today" in result.message and "line" in result.message


def test_returning_something_other_than_a_tensor_is_a_runtime_error(judge):
    result = judge("""
        def custom_kernel(data):
            return (honest(data[0]),)
        """)
    assert result.status == RUNTIME_ERROR, result.message
    assert "tuple" in result.message


@pytest.mark.parametrize("body, words", [("honest(x).T.contiguous()", "shape"),
                                         ("honest(x).float()", "dtype"),
                                         ("honest(x) * 1.05", "outside")])
def test_wrong_shape_dtype_or_numbers_are_wrong_answers(judge, body, words):
    result = judge(f"""
        def custom_kernel(data):
            (x,) = data
            return {body}
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert words in result.message
