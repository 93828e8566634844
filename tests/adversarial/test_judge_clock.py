"""The clock that counts is the judge's own (judge/crosscheck.py, judge/measure.py).

Its estimate is the median timed bracket less what empty calls cost, the empty cost never above what
the pristine worker showed before the import; on a GPU the worker's CUDA events are the figure only
where they are no lower than the least the judge's clock allows, and on the CPU the estimate is the
figure. Nothing is rejected for noise: a report the judge cannot confirm is replaced by its own figure.
Unit tests drive the arithmetic with calls made up here; the evaluations run hostile candidates on the
CPU, whose figure must stay at the 150 ms their calls really take.
"""

import contextlib
import math
import types

import pytest

import kscience.evaluate.judge.measure as measure
from kscience.evaluate.judge import crosscheck
from kscience.evaluate.judge.drive import Call
from kscience.evaluate.judge.session import Session
from kscience.evaluate.result import OK, REJECTED

from read_path_attacks import JSON_FORGERY, REPLACE_TIMER

SLOW_MS = 150


def calls(timed: list[float], nulls: list[float], events: list[float] | None = None) -> list[Call]:
    events = events or [max(w - 100.0, 1.0) for w in timed]
    return [Call("timed", e, e, w) for e, w in zip(events, timed)] + [Call("null", 0.0, 0.0, w) for w in nulls]


def test_the_estimate_is_the_timed_brackets_less_the_empty_ones():
    est = crosscheck.estimate(calls([1100.0, 1102.0, 1098.0] * 10, [100.0, 101.0, 99.0] * 3), crosscheck.Empty.of([]))
    assert est.us == pytest.approx(1000.0) and 0 < est.se_us < 5


def test_null_calls_a_candidate_slows_do_not_lower_the_estimate():
    pristine = crosscheck.Empty.of([100.0, 101.0, 99.0] * 10)
    slowed = crosscheck.estimate(calls([1100.0] * 30, [900.0] * 9), pristine)
    assert slowed.us == pytest.approx(1000.0)  # the pristine worker's empty calls, not the slowed ones
    quicker = crosscheck.estimate(calls([1100.0] * 30, [80.0] * 9), pristine)
    assert quicker.us == pytest.approx(1020.0)  # an empty call cheaper now than before: too slow, never too fast


def test_beside_other_processes_the_rounds_own_null_calls_count():
    pristine = crosscheck.Empty.of([100.0] * 10)
    est = crosscheck.estimate(calls([3100.0] * 30, [2100.0] * 9), pristine, shared=True)
    assert est.us == pytest.approx(1000.0)  # their time slices are in every bracket of the round


def test_erratic_timed_calls_do_not_widen_what_the_judge_allows():
    pristine = crosscheck.Empty.of([100.0, 102.0, 98.0, 101.0, 99.0] * 6)
    erratic = [1100.0 + 400.0 * ((7 * i) % 11) for i in range(40)]
    capped = crosscheck.estimate(calls(erratic, [100.0] * 9), pristine)
    uncapped = crosscheck.estimate(calls(erratic, [100.0] * 9), pristine, shared=True)
    assert capped.se_us < uncapped.se_us / 10


def test_a_report_longer_than_the_judges_bracket_is_impossible():
    bad = [Call("timed", 50.0, 2000.0, 1000.0)]
    assert "ran ahead of the judge's" in crosscheck.clock_problem(bad, 0.0, 1.0)
    assert crosscheck.clock_problem([Call("timed", 50.0, 60.0, 1000.0)], 0.0, 1.0) is None


def _time(monkeypatch, rounds: list[list[Call]], interpreted: bool = False):
    """time_shape on made-up rounds; returns (rejection or None, the shape's record)."""
    script = iter(rounds)
    monkeypatch.setattr(measure, "_round", lambda *a: measure.Round(next(script), [], 0.0, 1.0))
    session = types.SimpleNamespace(device=types.SimpleNamespace(interpreted=interpreted),
                                    phase=lambda name: contextlib.nullcontext(), recheck=lambda *a: None)
    res = types.SimpleNamespace(shape={"m": 1}, message="")
    pristine = crosscheck.Empty.of([100.0, 101.0, 99.0] * 10)
    return measure.time_shape(session, res, 0, None, 0, None, pristine), res


def test_events_the_judges_clock_allows_are_the_figure(monkeypatch):
    rnd = calls([1100.0, 1101.0, 1099.0] * 10, [100.0] * 9, events=[998.0, 999.0, 1001.0] * 10)
    problem, res = _time(monkeypatch, [rnd])
    assert problem is None and res.clock == "cuda events" and res.time_us == pytest.approx(999.0)
    assert res.judge_us == pytest.approx(1000.0) and not res.message


def test_events_below_what_the_judges_clock_allows_are_replaced_by_its_estimate(monkeypatch):
    # The worker rewrote its replies: 20 us per call, where the judge saw a millisecond, twice.
    forged = calls([1100.0, 1101.0, 1099.0] * 10, [100.0] * 9, events=[20.0] * 30)
    problem, res = _time(monkeypatch, [forged, forged])
    assert problem is None  # not rejected: timed by the judge instead
    assert res.clock == "judge's clock" and res.time_us == pytest.approx(1000.0)
    assert res.message.startswith("measured 2 times: the worker's CUDA events put a call at 20.0 us")
    assert "the judge's clock is recorded" in res.message


def test_one_round_the_judge_could_not_confirm_is_measured_again(monkeypatch):
    doubted = calls([1100.0] * 30, [100.0] * 9, events=[20.0] * 30)
    fine = calls([1100.0] * 30, [100.0] * 9, events=[1000.0] * 30)
    problem, res = _time(monkeypatch, [doubted, fine])
    assert problem is None and res.clock == "cuda events" and res.time_us == pytest.approx(1000.0)
    assert "measured 2 times" in res.message and "the cuda events" not in res.message


def test_an_estimate_that_never_settles_on_the_cpu_records_the_judges_upper_bound(monkeypatch):
    unsettled = calls([50.0] * 5, [900.0] * 5, events=[1.0] * 5)  # every estimate negative
    problem, res = _time(monkeypatch, [unsettled] * 3, interpreted=True)
    assert problem is None and res.clock == "judge's clock (whole brackets)" and res.time_us == pytest.approx(50.0)
    assert res.message.startswith("measured 3 times: the judge's own clock is unsure")


SLOW = f"""
import select

def slow(x):
    select.select([], [], [], {SLOW_MS / 1000})  # stands in for real work, whatever the clocks say
    return honest(x)
"""


def gains_nothing(result) -> None:
    assert result.status == OK, result.message
    (shape,) = [s for s in result.shapes if s.phase == "benchmark"]
    assert shape.time_us > 0.8 * SLOW_MS * 1000, shape
    assert shape.inputs == "staged by the judge"


def test_a_candidate_that_rewrites_its_replies_through_json_gains_nothing(judge):
    gains_nothing(judge(SLOW, JSON_FORGERY, """
        def custom_kernel(data):
            return slow(data[0])
        """, shapes="benchmarks"))


def test_a_candidate_that_slows_its_null_calls_gains_nothing(judge):
    # Null calls call nothing of the candidate's, but it can tell them from timed ones (here: the harness's
    # check switched off and its timed region replaced) and stall the worker in them, which would lower
    # every estimate by the stall.
    gains_nothing(judge(SLOW, REPLACE_TIMER, """
        import time

        def _stalling(self, run):
            if not run:
                time.sleep(0.5)
            return _real(self, run)

        def custom_kernel(data):
            _replace_timer(_stalling)
            return slow(data[0])
        """, shapes="benchmarks"))


def test_a_candidate_that_rewrites_the_problems_input_builder_gains_nothing(judge):
    # The worker's copy of the problem builds zeros for every seed, and the candidate answers zeros at
    # once: were timed inputs built by the worker, every call would be instant. The judge stages them.
    gains_nothing(judge(SLOW, """
        import gc
        from kscience.problems.spec import Problem

        def _zeros(seed, device, **shape):
            return (torch.zeros(shape["m"], shape["n"], dtype=torch.bfloat16),)

        def custom_kernel(data):
            (x,) = data
            if not bool(x.any()):
                return honest(x)  # instant: the answer to inputs the candidate chose
            gc.unfreeze()
            for o in gc.get_objects():
                if type(o) is Problem:
                    object.__setattr__(o, "generate_input", _zeros)
            return slow(x)
        """, shapes="benchmarks"))


def test_pristine_null_calls_come_before_any_candidate_code(judge, monkeypatch):
    events = []
    ask = Session.ask

    def asked(self, cmd, *a, **k):
        events.append("import" if cmd.get("cmd") == "import" else cmd.get("cmd") or "job")
        return ask(self, cmd, *a, **k)

    monkeypatch.setattr(Session, "ask", asked)
    result = judge("def custom_kernel(data):\n    return honest(data[0])\n", shapes="benchmarks")
    assert result.status == OK, result.message
    first = events.index("import")
    assert events[:first].count("call") >= 5 and "check" not in events[:first]
    assert events.index("job") < events.index("prepare") < first


def test_honest_slow_calls_are_timed_by_the_judges_own_clock(judge):
    result = judge(SLOW, """
        def custom_kernel(data):
            return slow(data[0])
        """, shapes="benchmarks")
    gains_nothing(result)
    (shape,) = result.shapes
    assert shape.clock == "judge's clock" and shape.time_us == pytest.approx(shape.judge_us)
    assert shape.time_us < 5 * SLOW_MS * 1000 and math.isfinite(shape.judge_se_us)
    assert result.phases_s["pristine"] > 0


def test_a_slots_spares_are_stopped_while_its_evaluation_times_a_shape(monkeypatch):
    """A spare importing beside a timed call disturbs the judge's clock (2026-11-26, an H100: an
    honest sort's brackets jumped by milliseconds). The slot's spares are stopped while a shape is
    timed and run again afterwards, so they still import between evaluations."""
    from kscience.evaluate import proctree
    from kscience.evaluate.judge.evaluation import evaluate
    from kscience.evaluate.result import EvalRequest
    from kscience.evaluate.sandbox import spares

    seen, time_shape = [], measure.time_shape

    def timing(session, *a, **k):
        for _, spare in spares._spares[session.worker.slot]:
            # frozen as a cgroup, or each of its processes stopped by SIGSTOP
            seen.append(spare._stopped == {-1} or bool(spare._stopped) and all(map(proctree.stopped, spare.pids())))
        return time_shape(session, *a, **k)

    spares.close_spares()
    monkeypatch.setattr(measure, "time_shape", timing)
    source = ("import torch\n\ndef custom_kernel(data):\n    x = data[0].float()\n"
              "    e = (x - x.amax(-1, keepdim=True)).exp()\n    return (e / e.sum(-1, keepdim=True)).to(torch.bfloat16)\n")
    try:
        result = evaluate(EvalRequest(problem="softmax", source=source, shapes="benchmarks"), keep_spare=True)
        kept = [spare for queue in spares._spares.values() for _, spare in queue]
        running = [not spare._stopped and not any(map(proctree.stopped, spare.pids())) for spare in kept]
    finally:
        spares.close_spares()
    assert result.status == OK, result.message
    assert len(seen) >= spares.SPARES_PER_SLOT and all(seen), seen
    assert len(running) == spares.SPARES_PER_SLOT and all(running)


def test_a_time_the_worker_cannot_have_measured_is_rejected(judge):
    # A host time longer than the judge's own bracket around the call: no honest worker can report it.
    result = judge("""
        import json

        _encode = json.JSONEncoder.encode

        def _forged(self, o):
            if isinstance(o, dict) and "event_us" in o:
                o = dict(o, host_us=1e9)
            return _encode(self, o)

        json.JSONEncoder.encode = _forged
        json._default_encoder = json.JSONEncoder()

        def custom_kernel(data):
            return honest(data[0])
        """, shapes="benchmarks")
    assert result.status == REJECTED, result.message
    assert "ran ahead of the judge's" in result.message

