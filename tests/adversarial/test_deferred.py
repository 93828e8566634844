"""Partial or deferred work, and outputs that are not what they seem.

The check reads the output twice, a moment apart, and the judge requires both reads to be
identical and correct: work that lands after the call returned, from a thread or a forked
process, shows up as a difference. Only a plain, dense tensor on the evaluation device is
accepted as an output.
"""

from kscience.evaluate.result import RUNTIME_ERROR, WRONG_ANSWER


def test_writing_part_of_the_output_is_a_wrong_answer(judge):
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            y = torch.empty_like(x)
            half = x.shape[1] // 2
            y[:, :half] = honest(x)[:, :half]
            return y
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "elements" in result.message


# Returns after 60 ms, leaving a helper to scribble into the output for a second and only then
# write the answer, as a kernel finishing in the background would.
_BACKGROUND = """
import time

def scribble_then_finish(y, x):
    stop = time.monotonic() + 1.0
    while time.monotonic() < stop:
        y.copy_(torch.randn(y.shape).to(y.dtype))
        time.sleep(0.001)
    y.copy_(honest(x))
"""


def caught_in_the_background(message: str) -> bool:
    """The helper scribbles every millisecond: a scribble between the check's two reads shows as a
    change after the call returned; with none in between, both reads hold noise, a wrong answer."""
    return "work went on in the background" in message or "elements outside" in message


def test_finishing_from_a_python_thread_is_caught(judge):
    result = judge(_BACKGROUND, """
        import threading

        def custom_kernel(data):
            (x,) = data
            y = torch.empty_like(x)
            threading.Thread(target=scribble_then_finish, args=(y, x), daemon=True).start()
            time.sleep(0.06)
            return y
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert caught_in_the_background(result.message)


def test_finishing_from_a_forked_process_is_caught(judge):
    # The output lives in shared memory that a forked child keeps writing after the call returned.
    result = judge(_BACKGROUND, """
        import mmap
        import os

        def custom_kernel(data):
            (x,) = data
            shared = mmap.mmap(-1, x.numel() * x.element_size())
            y = torch.frombuffer(shared, dtype=x.dtype).view(x.shape)
            if os.fork() == 0:
                torch.set_num_threads(1)
                scribble_then_finish(y, x)
                os._exit(0)
            time.sleep(0.06)
            return y
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert caught_in_the_background(result.message)


def test_a_tensor_subclass_with_lying_comparisons_is_refused(judge):
    result = judge("""
        class AlwaysEqual(torch.Tensor):
            def __eq__(self, other):
                return True

            def allclose(self, *args, **kwargs):
                return True

        def custom_kernel(data):
            return torch.zeros_like(data[0]).as_subclass(AlwaysEqual)
        """)
    assert result.status == RUNTIME_ERROR, result.message
    assert "AlwaysEqual" in result.message and "plain torch.Tensor" in result.message


def test_a_lazy_meta_tensor_is_a_wrong_answer(judge):
    result = judge("""
        def custom_kernel(data):
            return torch.empty_like(data[0], device="meta")
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "meta" in result.message


def test_a_sparse_tensor_is_a_wrong_answer(judge):
    result = judge("""
        def custom_kernel(data):
            return honest(data[0]).to_sparse()
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "layout" in result.message


def test_a_huge_output_is_refused_before_it_is_sent(judge):
    result = judge("""
        def custom_kernel(data):
            return torch.zeros(4096, 4096, dtype=data[0].dtype)  # 32 MiB against a 256-byte answer
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "larger than the answer" in result.message
