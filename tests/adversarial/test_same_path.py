"""Timed calls' inputs must differ from one call to the next in their numbers only.

Every timed call gets new inputs, copied into fixed buffers: anything else that differed between
calls (where the tensors lie, their strides, their alignment, a compilation just before the
call) would make an honest kernel's calls unequal, as a fresh set once seemed to on an H100 with
the fp8 seed at NUM_STAGES = 3. So every timed call hands the candidate the same tensors at the
same addresses: one set of buffers per measuring round (`measure.ROUNDS`: a doubtful first
round is measured again on newly prepared buffers).
"""

from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.judge.measure import ROUNDS
from kscience.evaluate.result import OK, EvalRequest
from kscience.problems import load_problem

# An honest fp8 candidate (the problem's seed: the problem forbids the reference's cuBLAS GEMM) that fails
# loudly if any call of a shape sees its inputs with other strides, storage offsets, 16-byte alignment or
# contiguity than the first call did, or if the timed calls' inputs are not always the same tensors.
_LAYOUT_PROBE = '''

_seed_kernel = custom_kernel
_layouts, _addresses = {}, {}
MAX_ROUNDS = ROUNDS_HERE


def custom_kernel(data):
    a, b, a_scale, b_scale, c = data
    key = (tuple(a.shape), tuple(b.shape))
    layout = [(t.stride(), t.storage_offset(), t.data_ptr() % 16, t.is_contiguous()) for t in data]
    if _layouts.setdefault(key, layout) != layout:
        raise RuntimeError(f"input layout changed between calls: {_layouts[key]} then {layout}")
    # One set of addresses for the checked call's own inputs, one for every timed call of a round.
    _addresses.setdefault(key, set()).add(tuple(t.data_ptr() for t in data))
    if len(_addresses[key]) > 1 + MAX_ROUNDS:
        raise RuntimeError(f"timed calls got inputs at {len(_addresses[key]) - 1} different addresses")
    return _seed_kernel(data)
'''


def test_every_timed_call_sees_identical_input_layouts():
    probe = load_problem("fp8_blockscale_gemm").seed_source + _LAYOUT_PROBE.replace("ROUNDS_HERE", str(max(ROUNDS)))
    result = evaluate(EvalRequest(problem="fp8_blockscale_gemm", source=probe,
                                  shapes="benchmarks"))
    assert result.status == OK, result.message
    (shape,) = result.shapes
    assert shape.n >= 3  # timed calls ran, each on new inputs
