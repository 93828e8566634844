"""The order of shapes is the judge's secret, fresh for every evaluation (judge.evaluation.shape_order).

A kernel whose answer for one shape depends on having seen another shape first (a table filled
by an earlier call) passes wherever the judge always runs shapes in the same order.
"""

from kscience.evaluate.judge import evaluation
from kscience.evaluate.result import OK, WRONG_ANSWER
from kscience.problems import load_problem

# Right for the widest CPU test shape only once the one-row shape has been seen.
_NEEDS_ONE_ROW_FIRST = """
_seen = set()

def custom_kernel(data):
    (x,) = data
    _seen.add(x.shape[0])
    if x.shape[1] == 4099 and 1 not in _seen:
        return torch.zeros_like(x)
    return honest(x)
"""


def _tests(seed: int) -> list[dict]:
    return evaluation.shape_order(load_problem("softmax").shapes("tests", True), seed, "tests")


def _seed_where(wanted) -> int:
    return next(s for s in range(1000) if wanted(_tests(s)))


def _position(shapes: list[dict], n: int) -> int:
    return next(i for i, s in enumerate(shapes) if s["n"] == n)


def test_orders_are_fresh_and_reproduce_from_their_seed():
    shapes = load_problem("softmax").shapes("tests", True)
    orders = {tuple(tuple(sorted(s.items())) for s in _tests(seed)) for seed in range(50)}
    assert len(orders) == 6  # every order of three shapes
    assert _tests(7) == _tests(7)
    assert sorted(map(str, _tests(7))) == sorted(map(str, shapes))  # the same shapes, none lost
    assert evaluation.order_seed() != evaluation.order_seed()


def test_a_kernel_that_needs_an_earlier_shape_is_caught_when_that_shape_comes_later(judge, monkeypatch):
    seed = _seed_where(lambda order: _position(order, 4099) < _position(order, 128))
    monkeypatch.setattr(evaluation, "order_seed", lambda: seed)
    result = judge(_NEEDS_ONE_ROW_FIRST)
    assert result.status == WRONG_ANSWER, result.message
    assert result.shape_order_seed == seed
    assert result.failing_shape["n"] == 4099


def test_the_recorded_seed_reproduces_the_order_the_shapes_ran_in(judge, monkeypatch):
    seed = _seed_where(lambda order: _position(order, 128) < _position(order, 4099))
    monkeypatch.setattr(evaluation, "order_seed", lambda: seed)
    result = judge(_NEEDS_ONE_ROW_FIRST)
    assert result.status == OK, result.message
    assert [s.shape for s in result.shapes] == _tests(result.shape_order_seed)


def test_timed_shapes_are_ordered_afresh_too():
    shapes = [{"m": m, "n": 8} for m in range(1, 6)]
    orders = {tuple(s["m"] for s in evaluation.shape_order(shapes, seed, "benchmarks")) for seed in range(20)}
    assert len(orders) > 10
