"""Attacks that need a GPU: side streams, pinned L2 lines, GPU memory, faults and hung kernels."""

import pytest
import torch
from read_path_attacks import ANSWER_ELSEWHERE, ANSWER_IN_SYNC

from kscience.evaluate.result import CRASHED, OK, REJECTED, RUNTIME_ERROR, TIMEOUT, WRONG_ANSWER

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

_OK_CALL = """
def custom_kernel(data):
    return honest(data[0])
"""


_SLEEP_CALL = """
def custom_kernel(data):
    y = honest(data[0])
    torch.cuda._sleep(700_000)  # about 0.4 ms of work that the output does not show
    return y
"""


def test_work_left_on_a_side_stream_is_timed_by_the_judges_clock(judge):
    # Events are recorded on the current stream; 0.4 ms of the work runs on another and is never joined.
    # The worker's device-wide wait before `done` holds it, so the judge's clock sees it: nothing gained.
    joined = judge(_SLEEP_CALL, shapes="benchmarks")
    assert joined.status == OK, joined.message
    result = judge("""
        _side = torch.cuda.Stream()

        def custom_kernel(data):
            (x,) = data
            y = torch.empty_like(x)
            _side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(_side):
                y.copy_(honest(x))
                torch.cuda._sleep(700_000)
            return y
        """, shapes="benchmarks")
    print(f"joined {joined.geomean_us} us; side stream {result.status} {result.geomean_us} us: {result.message}")
    assert result.status == OK, result.message
    assert result.geomean_us >= 0.8 * joined.geomean_us
    assert all(s.clock == "judge's clock" for s in result.shapes if s.phase == "benchmark")


@pytest.mark.parametrize("attack", [ANSWER_IN_SYNC, ANSWER_ELSEWHERE], ids=["in_sync", "elsewhere"])
def test_an_answer_computed_while_the_worker_is_read_gains_nothing(judge, attack):
    # Timed calls return zeros; the harness's sync or output packing, replaced on the instance,
    # would write the answer while the judge asks the worker for the output's bytes.
    result = judge(attack, shapes="benchmarks")
    assert result.status in (WRONG_ANSWER, REJECTED), result.message
    if result.status == WRONG_ANSWER:
        assert "timed call" in result.message


_DRIVER = """
import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
PERSISTING_L2_LIMIT = 0x06


class AccessPolicyWindow(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hit_ratio", ctypes.c_float),
                ("hit_prop", ctypes.c_int), ("miss_prop", ctypes.c_int)]


class StreamAttrValue(ctypes.Union):
    _fields_ = [("window", AccessPolicyWindow), ("pad", ctypes.c_char * 64)]


def pin_in_l2(t):
    # Reserve persisting L2 and mark t's memory as persisting for work on the current stream.
    print("set limit:", cuda.cuCtxSetLimit(PERSISTING_L2_LIMIT, ctypes.c_size_t(8 << 20)))
    value = StreamAttrValue()
    value.window = AccessPolicyWindow(t.data_ptr(), min(t.numel() * t.element_size(), 8 << 20), 1.0, 2, 1)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    print("set window:", cuda.cuStreamSetAttribute(stream, 1, ctypes.byref(value)))
"""


def _persisting_l2_bytes() -> int:
    """How much persisting L2 a context here can really reserve (0: none). The device attribute
    alone is not enough: some virtualised GPUs advertise the feature and refuse the reservation."""
    import ctypes

    torch.zeros(1, device="cuda")  # a current context to ask
    cuda, value = ctypes.CDLL("libcuda.so.1"), ctypes.c_size_t()
    if cuda.cuCtxSetLimit(0x06, ctypes.c_size_t(8 << 20)) != 0:
        return 0
    got = cuda.cuCtxGetLimit(ctypes.byref(value), 0x06)
    cuda.cuCtxSetLimit(0x06, ctypes.c_size_t(0))
    return value.value if got == 0 else 0


def test_pinning_inputs_in_l2_is_rejected(judge):
    if not _persisting_l2_bytes():
        pytest.skip("no persisting L2 can be reserved on this GPU")
    result = judge(_DRIVER, """
        def custom_kernel(data):
            pin_in_l2(data[0])
            return honest(data[0])
        """)
    assert result.status == REJECTED, f"{result.message}\n{result.stdout_tail[-300:]}"
    assert "persisting L2" in result.message


def test_asking_for_more_gpu_memory_than_there_is_is_a_runtime_error(judge):
    result = judge("""
        def custom_kernel(data):
            hoard = torch.empty(2**40, dtype=torch.uint8, device="cuda")
            return honest(data[0])
        """)
    assert result.status == RUNTIME_ERROR, result.message
    assert "OutOfMemoryError" in result.message


def test_taking_all_gpu_memory_from_the_judge_is_rejected(judge):
    # Allocates with the driver, past PyTorch's per-process cap, after its first correct answer;
    # the judge then has no memory left for its next reference and must say so, not raise.
    torch.cuda.empty_cache()
    result = judge(_DRIVER, """
        held = []

        def take_everything():
            size = 1 << 40
            while size >= 1 << 20:
                ptr = ctypes.c_uint64()
                if cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0:
                    held.append(ptr.value)
                else:
                    size //= 2

        def custom_kernel(data):
            y = honest(data[0])
            torch.cuda.synchronize()
            if not held:
                take_everything()
            return y
        """, shapes="tests")
    assert result.status == REJECTED, result.message
    assert "GPU memory" in result.message


def test_an_illegal_address_is_a_crash(judge):
    result = judge("""
        import triton
        import triton.language as tl

        @triton.jit
        def wild_store(y_ptr):
            offsets = tl.arange(0, 128).to(tl.int64) + (1 << 40)
            tl.store(y_ptr + offsets, tl.zeros((128,), dtype=tl.float32))

        def custom_kernel(data):
            y = torch.empty(128, dtype=torch.float32, device="cuda")
            wild_store[(1,)](y)
            torch.cuda.synchronize()
            return honest(data[0])
        """, shapes="tests")
    assert result.status == CRASHED, result.message
    assert "illegal" in result.message.lower()


def test_a_kernel_that_never_ends_times_out_and_the_gpu_recovers(judge, monkeypatch):
    import kscience.evaluate.judge.session as session_module

    monkeypatch.setitem(session_module.LIMITS, "check", (10.0, 10.0))
    result = judge("""
        import triton
        import triton.language as tl

        @triton.jit
        def spin(flag_ptr):
            while tl.load(flag_ptr, volatile=True) == 0:
                pass

        def custom_kernel(data):
            flag = torch.zeros(1, dtype=torch.int32, device="cuda")
            spin[(1,)](flag)
            torch.cuda.synchronize()
            return honest(data[0])
        """, shapes="tests")
    assert result.status == TIMEOUT, result.message
    assert "check" in result.message
    after = judge(_OK_CALL, shapes="tests")
    assert after.status == OK, after.message


def test_side_work_hidden_behind_a_busy_gpu_of_its_own_making_gains_nothing(judge):
    """The candidate keeps the GPU busy from a thread of its own, as if a neighbour were there, and
    hopes to hide 0.4 ms of work per call on a side stream inside the wait. No process of the worker's
    counts as a neighbour (contexts.py), and the judge's clock holds every stream's work."""
    joined = judge(_SLEEP_CALL, shapes="benchmarks")
    assert joined.status == OK, joined.message
    result = judge("""
        import threading

        _hog, _side = torch.cuda.Stream(), torch.cuda.Stream()

        def _keep_busy():
            a = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
            with torch.cuda.stream(_hog):
                while True:
                    for _ in range(20):
                        a @ a
                    _hog.synchronize()

        threading.Thread(target=_keep_busy, daemon=True).start()

        def custom_kernel(data):
            _side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(_side):
                y = honest(data[0])
                torch.cuda._sleep(700_000)  # about 0.4 ms
            return y
        """, shapes="benchmarks")
    print(f"joined {joined.geomean_us} us; hidden {result.status} {result.geomean_us} us: {result.message}")
    assert result.status != OK or result.geomean_us >= 0.8 * joined.geomean_us, result.message


def test_an_answer_computed_before_the_call_arrives_gains_nothing(judge):
    """A thread of the candidate's watches the fixed input buffer from a stream of its own and, once the
    judge has written new inputs there, computes the answer before the call command arrives; the call
    itself only hands back the buffer. The judge's clock started before it wrote the inputs, so the work
    is inside it (docs/evaluation.md: what it can still gain is the command's own latency).
    Gaining nothing: rejected or wrong, or timed at no less than half the honest call."""
    honest = judge(_OK_CALL, shapes="benchmarks")
    assert honest.status == OK, honest.message
    result = judge("""
        import sys
        import threading

        sys.setswitchinterval(1e-6)  # the thread gets the interpreter between the harness's steps
        _side = torch.cuda.Stream()
        _state = {}

        def _watch():
            with torch.cuda.stream(_side):  # never ordered after the harness's stream
                seen = None
                while True:
                    x, out = _state["x"], _state["out"]
                    probe = x.view(-1)[-64:].float().sum().item()  # waits on this stream alone
                    if probe != seen:
                        torch.cuda._sleep(60_000)  # let the copy of the inputs finish
                        out.copy_(honest(x))
                        seen = probe

        def custom_kernel(data):
            (x,) = data
            if _state.get("x") is None or _state["x"].data_ptr() != x.data_ptr() or _state["x"].shape != x.shape:
                _state["x"], _state["out"] = x, honest(x)
                if "thread" not in _state:
                    _state["thread"] = threading.Thread(target=_watch, daemon=True)
                    _state["thread"].start()
            return _state["out"]
        """, shapes="benchmarks")
    print(f"honest {honest.geomean_us} us; attack {result.status} {result.geomean_us} us: {result.message[:300]}")
    assert result.status != OK or result.geomean_us >= 0.5 * honest.geomean_us, result.message
