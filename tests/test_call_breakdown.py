"""What a timed call holds, next to its timed median: the time before the first kernel, in kernels, in the
gaps between them and after the last, and on a GPU the allocations made inside the call. The arithmetic
and the parse are checked on synthetic records (the GPU's come from CUPTI, which this machine lacks); the
interpreter path runs for real; the prompt says what the timed median counts in the judge's own words."""

from __future__ import annotations

from pathlib import Path

from kscience.evaluate import kernel_times
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import EvalRequest, EvalResult, ShapeResult, clock_counts
from kscience.record.seen import Seen
from kscience.scientist.prompt_parts import profile_block

TWO_LAUNCHES = (Path(__file__).parent / "data" / "two_launch_softmax.py").read_text()


def test_the_breakdown_adds_up_and_counts_overlapping_kernels_once():
    b = kernel_times.call_breakdown(100.0, [[10.0, 30.0], [25.0, 40.0], [60.0, 70.0]])
    assert b == {"call_us": 100.0, "before_first_us": 10.0, "kernels_us": 40.0, "gaps_us": 20.0,
                 "after_last_us": 30.0, "launches": 3}
    assert b["before_first_us"] + b["kernels_us"] + b["gaps_us"] + b["after_last_us"] == b["call_us"]
    # A clock that puts a kernel a little past the call's end is clipped to it; no kernel: all host work.
    assert kernel_times.call_breakdown(50.0, [[40.0, 52.0]])["after_last_us"] == 0.0
    assert kernel_times.call_breakdown(50.0, []) == {"call_us": 50.0, "before_first_us": 50.0, "kernels_us": 0.0,
                                                     "gaps_us": 0.0, "after_last_us": 0.0, "launches": 0}


def test_the_median_call_is_kept_with_its_allocations_and_a_malformed_reply_gives_none():
    reply = {"calls": 3, "per_call": [[300.0, [[100.0, 250.0]], [2, 4 << 20, 1]],
                                      [242.6, [[95.0, 228.0], [231.0, 231.5]], [2, 4 << 20, 0]],
                                      [240.0, [[90.0, 220.0]], [2, 4 << 20, 0]]]}
    call = kernel_times.parse_calls(reply)
    assert call["call_us"] == 242.6 and call["launches"] == 2 and call["calls"] == 3
    assert (call["before_first_us"], call["gaps_us"]) == (95.0, 3.0)
    assert (call["allocations"], call["allocated_bytes"], call["cuda_mallocs"]) == (2, 4 << 20, 0)
    for bad in ({"calls": 2, "per_call": reply["per_call"]},  # not one row per profiled call
                {"calls": 1, "per_call": [[float("nan"), [], None]]},
                {"calls": 1, "per_call": [[10.0, [[5.0, 1.0]], None]]},  # a kernel that ends before it starts
                {"calls": 1, "per_call": [[10.0, [[1.0, 2.0]], [1, -5, 0]]]},
                {"calls": 1, "per_call": [[10.0, [[1.0, 2.0]] * (kernel_times.MAX_SPANS + 1), None]]},
                {"calls": 1}):
        assert kernel_times.parse_calls(bad) == {}


def test_an_interpreted_timed_call_is_broken_down_and_the_prompt_says_what_the_median_counts():
    result = evaluate(EvalRequest(problem="softmax", source=TWO_LAUNCHES, shapes="benchmarks"))
    assert result.status == "ok", result.message
    (bench,) = result.shapes
    call = bench.call
    assert call["launches"] == 2 and call["calls"] == kernel_times.CALLS[1] and "allocations" not in call
    assert call["kernels_us"] > 0 and call["before_first_us"] >= 0 and call["gaps_us"] >= 0
    parts = call["before_first_us"] + call["kernels_us"] + call["gaps_us"] + call["after_last_us"]
    assert abs(parts - call["call_us"]) < 0.01
    block = profile_block(Seen.of(None, result))
    assert "- what a call holds (the median of 1 call(s) profiled after the timed calls" in block
    assert f"timed median {bench.time_us:,.1f} us; profiled call {call['call_us']:,.1f} us = " in block
    assert "in 2 launch(es) (interpreted Triton launches)" in block
    assert f"What the timed median counts: {clock_counts(True)}." in block


def test_a_gpu_call_shows_its_allocations_beside_the_kernels():
    call = {"call_us": 250.1, "before_first_us": 95.0, "kernels_us": 132.9, "gaps_us": 3.1, "after_last_us": 19.1,
            "launches": 2, "calls": 3, "allocations": 2, "allocated_bytes": 4 << 20, "cuda_mallocs": 1}
    shape = ShapeResult(shape={"m": 4096}, ok=True, phase="benchmark", time_us=242.6, call=call)
    block = profile_block(Seen.of(None, EvalResult(status="ok", message="", shapes=[shape])))
    assert ("m=4096: timed median 242.6 us; profiled call 250.1 us = 95.0 us before the first kernel + 132.9 us in "
            "2 launch(es) (kernels on the GPU) + 3.1 us of gaps between them + 19.1 us after the last; inside the "
            "call 2 allocation(s) of 4.0 MiB, 1 of them new cudaMalloc") in block
    assert f"What the timed median counts: {clock_counts(False)}." in block
