"""Stale results: answers remembered from an earlier call instead of computed for this one.

Every check call gets inputs from a fresh secret seed, the timed loop rotates several input
sets through fixed buffers and slips in never-seen sets, and the judge rechecks one output
per set and every fresh output. Returned outputs are poisoned once copied, so even memory
the allocator hands back holds no old answer.
"""

from kscience.evaluate.result import REJECTED, WRONG_ANSWER


def test_cache_by_shape_fails_the_recheck_of_timed_calls(judge):
    result = judge("""
        _by_shape = {}

        def custom_kernel(data):
            (x,) = data
            if x.shape not in _by_shape:
                _by_shape[x.shape] = honest(x)
            return _by_shape[x.shape].clone()
        """, shapes="all")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_cache_by_buffer_address_fails_the_recheck(judge):
    # The timed loop reuses fixed buffers: an address-keyed cache is right for one input set only.
    result = judge("""
        _by_address = {}

        def custom_kernel(data):
            (x,) = data
            key = (x.data_ptr(), tuple(x.shape))
            if key not in _by_address:
                _by_address[key] = honest(x)
            return _by_address[key].clone()
        """, shapes="all")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_cache_by_call_count_fails_the_recheck(judge):
    # Honest for the four check calls (three test shapes, one benchmark shape), stale afterwards.
    result = judge("""
        _calls = []

        def custom_kernel(data):
            _calls.append(1)
            if len(_calls) <= 4:
                custom_kernel.last = honest(data[0])
            return custom_kernel.last.clone()
        """, shapes="all")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_behaving_only_while_checked_fails_the_recheck(judge):
    # Computes only on the first call of each shape (the check); afterwards it just allocates,
    # hoping the allocator returns memory that still holds an earlier answer.
    result = judge("""
        _seen = set()

        def custom_kernel(data):
            (x,) = data
            if x.shape in _seen:
                return torch.empty_like(x)
            _seen.add(x.shape)
            return honest(x)
        """, shapes="all")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_returning_the_output_buffer_of_the_previous_call_fails(judge):
    # Reuses one output tensor and skips the work after the first call: the poison the harness
    # leaves in a returned output after copying it comes back as NaN.
    result = judge("""
        _out = {}

        def custom_kernel(data):
            (x,) = data
            if x.shape not in _out:
                _out[x.shape] = honest(x)
            return _out[x.shape]
        """, shapes="all")
    assert result.status == WRONG_ANSWER, result.message
    assert "NaN" in result.message


def test_cache_keyed_on_input_contents_is_rejected(judge):
    # An expensive kernel (the sleep stands in for real work) that remembers answers by input
    # contents: fast on the rotated sets it has seen, slow on the never-seen sets.
    result = judge("""
        import time

        _by_content = {}

        def custom_kernel(data):
            (x,) = data
            key = (tuple(x.shape), x.view(torch.int16)[:, :16].sum().item(), x.view(torch.int16)[-1, -16:].sum().item())
            if key not in _by_content:
                time.sleep(1.0)
                _by_content[key] = honest(x)
            return _by_content[key].clone()
        """, shapes="all")
    assert result.status == REJECTED, result.message
    assert "reused" in result.message


def test_returning_an_input_is_a_wrong_answer(judge):
    result = judge("""
        def custom_kernel(data):
            return data[0]
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "view of input" in result.message


def test_returning_a_view_of_an_input_is_a_wrong_answer(judge):
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            x.copy_(honest(x))  # right numbers, in the input's own memory
            return x.view(-1).view(x.shape)
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "view of input" in result.message
