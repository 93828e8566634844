"""Stealing the answer: there is nothing to steal in the worker, and the judge is out of reach.

Expected outputs are computed only in the trusted process. Inside the worker a candidate can
find inputs and its own old outputs (poisoned), and it can find the input sets of the timed
loop, but answers it precomputes from those are useless on the fresh inputs the loop slips in.
"""

import pytest

from kscience.evaluate.result import OK, REJECTED, WRONG_ANSWER
from kscience.evaluate.sandbox.workers import namespaces_available

# Returns the first answer-shaped tensor that is not its own input, found by `search()`.
_RETURN_FOUND = """
def custom_kernel(data):
    (x,) = data
    for t in search():
        if t.shape == x.shape and t.dtype == x.dtype and t.data_ptr() != x.data_ptr():
            return t.clone()
    return torch.zeros_like(x)
"""


def test_nothing_answer_like_lives_in_the_garbage_collector(judge):
    result = judge("""
        import gc

        def search():
            gc.unfreeze()  # what the worker froze is hidden from get_objects
            return [o for o in gc.get_objects() if type(o) is torch.Tensor]
        """, _RETURN_FOUND)
    assert result.status == WRONG_ANSWER, result.message


def test_nothing_answer_like_lives_in_harness_frames_or_globals(judge):
    result = judge("""
        import sys

        def tensors_in(namespace):
            found = []
            for value in list(namespace.values()):
                if type(value) is torch.Tensor:
                    found.append(value)
                for attr in list(getattr(value, "__dict__", {}).values()):
                    if type(attr) is torch.Tensor:
                        found.append(attr)
            return found

        def search():
            found, frame = [], sys._getframe(2)
            while frame is not None:
                found += tensors_in(frame.f_locals) + tensors_in(frame.f_globals)
                frame = frame.f_back
            for name, module in list(sys.modules.items()):
                if name.startswith("kscience") or name == "__main__":
                    found += tensors_in(vars(module))
            return found
        """, _RETURN_FOUND)
    assert result.status == WRONG_ANSWER, result.message


def test_answers_precomputed_from_every_input_the_worker_holds_gain_nothing(judge):
    # Walks up to the timed loop's frames and precomputes, honestly (the problem forbids calling its
    # reference's torch.softmax), the answer for every input tensor it finds there (the warm-up's and
    # the fixed buffers' contents), during warm-up, where nothing is timed. The sleep stands in for an
    # expensive kernel on inputs it could not precompute: every timed call's inputs are new, so every
    # call sleeps.
    result = judge("""
        import sys
        import time

        answers = {}

        def fingerprint(x):
            return tuple(x.shape), tuple(x.view(torch.int16)[0, :32].tolist())

        def custom_kernel(data):
            (x,) = data
            frame = sys._getframe(1)
            while frame is not None:  # every list of tensors in the harness's frames and objects
                owner = frame.f_locals.get("self")
                values = list(frame.f_locals.values()) + list(getattr(owner, "__dict__", {}).values())
                for v in values:
                    if isinstance(v, list) and v and isinstance(v[0], torch.Tensor) and v[0].dim() == 2 \
                            and v[0].data_ptr() != x.data_ptr():  # not this call's own inputs
                        answers.setdefault(fingerprint(v[0]), honest(v[0]))
                frame = frame.f_back
            known = answers.get(fingerprint(x))
            if known is not None:
                return known.clone()
            time.sleep(0.2)
            return honest(x)
        """, shapes="benchmarks")
    assert result.status in (OK, REJECTED, WRONG_ANSWER), result.message
    if result.status == OK:
        assert result.shapes[0].time_us > 160_000, result.shapes[0]


@pytest.mark.skipif(not namespaces_available(), reason="unprivileged user namespaces unavailable")
def test_the_judge_is_invisible_from_the_worker(judge):
    # Looks for any process beyond the worker and its namespace's first process, and tries to read its memory.
    result = judge("""
        import os

        def custom_kernel(data):
            mine = {os.getpid(), os.getppid()}
            for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
                if pid in mine:
                    continue
                try:
                    print("sees", open(f"/proc/{pid}/cmdline", "rb").read()[:60])
                    open(f"/proc/{pid}/mem", "rb").read(1)
                    print("read memory of", pid)
                except OSError:
                    pass
            return honest(data[0])
        """)
    assert result.status == OK, result.message
    assert "sees" not in result.stdout_tail and "read memory" not in result.stdout_tail
