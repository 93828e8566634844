"""Big tensors are compared on byte ranges the judge draws after the call (see compare.py).

The thresholds are shrunk so the interpreter's small shapes take the sampled path: an honest
kernel still passes, and attacks that the sampled reads must catch are still caught.
"""

import pytest
import torch

import kscience.evaluate.judge.compare as compare
from kscience.evaluate.judge import drive
from kscience.evaluate.result import OK, WRONG_ANSWER


@pytest.fixture
def sampled(monkeypatch):
    monkeypatch.setattr(compare, "BLOCK_BYTES", 64)
    monkeypatch.setattr(compare, "CHECK_BLOCKS", 2)


def test_ranges_cover_small_tensors_whole_and_sample_big_ones_in_aligned_blocks(sampled):
    assert compare.sample_ranges(0) == []
    assert compare.sample_ranges(100) == [[0, 100]]
    big = 10 * compare.BLOCK_BYTES + 6  # 11 blocks, the last one partial
    ranges = compare.sample_ranges(big)
    assert len(ranges) == 2
    assert all(o % compare.BLOCK_BYTES == 0 and 0 < n <= compare.BLOCK_BYTES and o + n <= big for o, n in ranges)
    assert ranges == sorted(ranges) and len({o for o, _ in ranges}) == len(ranges)
    huge = 10_000 * compare.BLOCK_BYTES
    assert len(compare.sample_ranges(huge, blocks=3)) == 3
    assert compare.sample_ranges(huge, blocks=3) != compare.sample_ranges(huge, blocks=3)  # drawn afresh every time


def test_the_stopping_rule_follows_the_median_not_rare_slow_calls():
    steady = [100.0 + (i % 5) * 0.1 for i in range(40)]
    assert drive.median_rse(steady) < 0.001
    # Two calls slowed tenfold (an interrupt, a clock change) leave the median's precision alone,
    # where a mean's standard error would call for hundreds more calls.
    assert drive.median_rse(steady + [1000.0, 1000.0]) < 0.001
    assert drive.median_rse([100.0, 120.0, 80.0, 110.0, 90.0]) > 0.05
    assert drive.median_rse([5.0]) == 1.0


def test_gather_reads_exactly_the_ranges():
    t = torch.arange(16, dtype=torch.int32)
    got = compare.gather(t, [[0, 4], [12, 8]]).view(torch.int32)
    assert got.tolist() == [0, 3, 4]


def test_an_honest_kernel_passes_sampled_comparisons(judge, sampled):
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="all")
    assert result.status == OK, result.message


def test_a_kernel_that_writes_its_inputs_is_caught_by_sampled_reads(judge, sampled):
    result = judge("""
        def custom_kernel(data):
            (x,) = data
            y = honest(x)
            x.mul_(0.5)
            return y
        """)
    assert result.status == WRONG_ANSWER, result.message
    assert "input 0 was modified" in result.message


def test_stale_outputs_on_timed_calls_are_caught_by_sampled_rechecks(judge, sampled):
    # Right on the checked calls (each on brand-new inputs), then the first answer seen for a shape
    # forever after: every timed call on another input set returns a stale result.
    result = judge("""
        _seen = {}

        def custom_kernel(data):
            (x,) = data
            key = tuple(x.shape)
            if key not in _seen or _seen[key][0] < 1:
                _seen[key] = (_seen.get(key, (0, None))[0] + 1, honest(x))
                return honest(x)
            return _seen[key][1].clone()
        """, shapes="benchmarks")
    assert result.status == WRONG_ANSWER, result.message
    assert "timed call" in result.message


def test_benchmark_shapes_are_checked_at_sampled_ranges_with_both_edges(judge, monkeypatch):
    # Benchmark shapes' checked outputs are not sent whole: the judge reads blocks it draws, and
    # always the first and last. Two drawn blocks of the 16 in the CPU shape's 1 MiB output: a wrong
    # last row is found by the last block alone.
    monkeypatch.setattr(compare, "CHECK_BLOCKS", 2)
    honest = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """, shapes="benchmarks")
    assert honest.status == OK, honest.message
    wrong_edge = judge("""
        def custom_kernel(data):
            out = honest(data[0])
            out[-1] = 0
            return out
        """, shapes="benchmarks")
    assert wrong_edge.status == WRONG_ANSWER, wrong_edge.message
    assert "sampled elements" in wrong_edge.message
