"""Stale results: answers remembered from an earlier call instead of computed for this one.

Every check call gets inputs from a fresh secret seed, every timed call gets inputs from a
seed the judge draws for that call alone (copied into the same fixed buffers), and the judge
rechecks outputs it chooses after the calls returned. Returned outputs are poisoned once copied,
so even memory the allocator hands back holds no old answer.
"""

from kscience.evaluate.judge import drive
from kscience.evaluate.judge.session import Session
from kscience.evaluate.result import OK, REJECTED, WRONG_ANSWER

MISS_S = 0.1  # what a cache miss costs the memoising candidates below (under the CPU cache check's old 300 ms slack)


def gained_nothing(result) -> bool:
    """Judged at the speed of its misses, or not believed at all."""
    if result.status != OK:
        return result.status in (REJECTED, WRONG_ANSWER)
    return all(s.time_us >= 0.8 * MISS_S * 1e6 for s in result.shapes if s.time_us)


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


def test_cache_keyed_on_a_strided_sample_of_the_inputs_gains_nothing(judge):
    # The attack reported against gpu-mode/reference-kernels (issue #162): answers remembered by
    # the shape and a strided sample of about 256 elements. Were any timed call's content seen
    # before, its call would hit, and the median of the timed calls would be a hit's time.
    result = judge(f"""
        import time

        _memo = {{}}

        def _signature(x):
            flat = x.reshape(-1)
            return tuple(x.shape), tuple(flat[::max(1, flat.numel() // 256)].view(torch.int16).tolist())

        def custom_kernel(data):
            (x,) = data
            key = _signature(x)
            if key not in _memo:
                time.sleep({MISS_S})
                _memo[key] = honest(x)
            return _memo[key].clone()
        """, shapes="benchmarks")
    assert gained_nothing(result), (result.status, result.message, [s.time_us for s in result.shapes])


def test_cache_keyed_on_whole_input_contents_gains_nothing(judge):
    # The strongest key: every byte. It hits only if some timed call repeats content exactly.
    result = judge(f"""
        import hashlib
        import time

        _memo = {{}}

        def custom_kernel(data):
            (x,) = data
            key = hashlib.sha256(x.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
            if key not in _memo:
                time.sleep({MISS_S})
                _memo[key] = honest(x)
            return _memo[key].clone()
        """, shapes="benchmarks")
    assert gained_nothing(result), (result.status, result.message, [s.time_us for s in result.shapes])


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


def test_no_two_sets_of_inputs_of_an_evaluation_share_a_seed(judge, monkeypatch):
    # The invariant behind the two tests above, read off the judge's own commands and builds: every
    # check and warm-up has inputs from a seed of its own, and so does every timed call, whose inputs
    # the judge builds and stages itself (its commands carry no seed), so no timed call repeats any content.
    sent, timed, ask, inputs = [], [], Session.ask, drive._inputs

    def record(self, cmd, *a, **k):
        sent.append(cmd)
        return ask(self, cmd, *a, **k)

    def staged(session, shape, plan, buffers, used, kind):
        seed, data = inputs(session, shape, plan, buffers, used, kind)
        if kind == "timed":
            timed.append(seed)
        return seed, data

    monkeypatch.setattr(Session, "ask", record)
    monkeypatch.setattr(drive, "_inputs", staged)
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="all")
    assert result.status == OK, result.message
    calls = [c for c in sent if c.get("cmd") == "call"]
    assert calls and not any("seed" in c for c in calls)  # staged: the judge writes the inputs
    seeds = [c["seed"] for c in sent if c.get("cmd") == "check"]
    seeds += [s for c in sent if c.get("cmd") == "prepare" for s in c["seeds"]] + timed
    assert timed and len(seeds) == len(set(seeds))
