"""The one candidate record: the store returns `Candidate`s carrying their `EvalResult`, they read back as the
rows they were stored as, and the numbers read off them are those the run's readers computed from the rows."""

import json
from collections.abc import Mapping
from dataclasses import is_dataclass

import pytest

from kscience.evaluate.result import EvalResult, ShapeResult
from kscience.problems import shape_label
from kscience.record.snapshot import Snapshot, best_candidate
from kscience.record.store import PENDING, Store
from kscience.record.candidate import Candidate, predicted_range, range_text, speedup, uplift_pct


def _result(us: float, host: str = "h1") -> EvalResult:
    shapes = [ShapeResult(shape={"n": 8}, ok=True, phase="test"),
              ShapeResult(shape={"n": 64}, ok=True, phase="benchmark", time_us=us, floor_us=us / 10),
              ShapeResult(shape={"n": 256}, ok=True, phase="benchmark", time_us=2 * us, floor_us=us / 5)]
    result = EvalResult(status="ok", message="ok", geomean_us=us * 2 ** 0.5, shapes=shapes,
                        device={"name": "cpu", "host": host}, timing_label="cpu interpreter")
    return result


def _stored_run(tmp_path):
    store = Store(tmp_path / "k.db")
    run_id = store.create_run(name="", problem="softmax", overrides={}, llm="offline", strategy="tournament",
                              config={"iterations": 1}, environment={})
    seed = store.add_candidate(run_id, kind="seed", source="S", hypothesis="seed", iteration=0)
    child = store.add_candidate(run_id, kind="child", source="C", hypothesis="tile", iteration=1, parent_id=seed.id)
    slower = store.add_candidate(run_id, kind="child", source="D", hypothesis="fast elsewhere", iteration=1,
                                 parent_id=seed.id)
    store.record_result(seed.id, _result(200.0))
    store.record_result(child.id, _result(100.0))
    store.record_result(slower.id, _result(50.0, host="h2"), {"slower_than": child.id})
    return store, run_id


def test_the_store_returns_candidates_carrying_their_eval_result(tmp_path):
    store, run_id = _stored_run(tmp_path)
    pending = store.add_candidate(run_id, kind="child", source="E", hypothesis="later", iteration=2)
    assert isinstance(pending, Candidate) and pending.status == PENDING and pending.result is None
    seed, child, slower, _ = cands = store.candidates(run_id)
    assert all(isinstance(c, Candidate) for c in cands)
    assert isinstance(child.result, EvalResult) and isinstance(child.result.shapes[1], ShapeResult)
    assert (child.kind, child.parent_id, child.geomean_us) == ("child", seed.id, child.result.geomean_us)
    assert child.ok and child.host == "h1" and not child.notes
    # What the run added to a verdict is kept beside the EvalResult, not lost
    assert slower.notes == {"slower_than": child.id} and slower.host == "h2"
    # It reads back as the row it was stored as: JSON output and notebooks see the same text as before
    raw = store._query("SELECT * FROM candidates WHERE id=?", (child.id,))[0]
    assert child.to_row() == raw and json.loads(json.dumps(child.to_row())) == raw
    assert store.candidate(child.id) == child and store.evaluated_with_source(run_id, "C") == child


def test_a_candidate_is_read_by_its_attributes_not_as_a_row(tmp_path):
    store, run_id = _stored_run(tmp_path)
    child = store.candidates(run_id)[1]
    assert is_dataclass(child) and not isinstance(child, Mapping)
    with pytest.raises(TypeError):
        child["status"]
    assert child != child.to_row()  # the row is what to_row() gives, not the record itself


def test_the_helpers_agree_with_the_numbers_read_from_the_stored_rows(tmp_path):
    store, run_id = _stored_run(tmp_path)
    seed, child, slower = store.candidates(run_id)
    for cand in (seed, child, slower):
        shapes = cand.to_row()["result"]["shapes"]
        assert cand.times == {shape_label(s["shape"]): s["time_us"] for s in shapes
                              if s.get("phase") == "benchmark" and s.get("time_us")}
        assert cand.floor_times == {shape_label(s["shape"]): s["floor_us"] for s in shapes
                                    if s.get("phase") == "benchmark" and s.get("floor_us")}
    assert child.speedup_over(seed) == seed.to_row()["geomean_us"] / child.to_row()["geomean_us"] == 2.0
    assert child.uplift_over(seed.geomean_us) == (200.0 / 100.0 - 1.0) * 100.0 == uplift_pct(seed.geomean_us,
                                                                                               child.geomean_us)
    assert speedup(None, 1.0) is None and uplift_pct(1.0, None) is None
    # The fastest figure came from another host and lost there: the best is the child
    assert best_candidate([seed, child, slower]) == child
    snap = Snapshot.load(store, run_id)
    assert snap.best == child and snap.speedups(child) == (2.0, None)
    assert snap.metrics().speedup_vs_seed == 2.0


def test_a_predicted_range_has_one_type_and_one_text():
    assert predicted_range(5.0, 20.0) == (5.0, 20.0) and predicted_range(7.0, None) == (7.0, 7.0)
    assert predicted_range(None, 3.0) is None
    assert range_text((5.0, 20.0)) == "+5..+20%" and range_text((-3.0, 0.0)) == "-3..+0%"
