"""The run store: schema, durability settings, round trips, redaction, and bad database files."""

import sqlite3
import threading
from dataclasses import replace

import pytest

from kscience.evaluate.result import EvalResult, ShapeResult
from kscience.record.snapshot import run_listing
from kscience.record.database import SCHEMA_VERSION
from kscience.record.llm_call import LLMCall
from kscience.record.rows import FindingRow, LlmUsage, PlanRow, ProfileRow
from kscience.record.store import PENDING, Store, StoreError


def _run(store: Store, **kw) -> str:
    return store.create_run(name=kw.get("name", ""), problem="softmax", overrides={}, llm="offline",
                            strategy="tournament", config={"iterations": 2}, environment={"python": "3.11"})


def _result(status="ok", us=100.0) -> EvalResult:
    return EvalResult(status=status, message=f"{status} message", geomean_us=us if status == "ok" else None,
                      shapes=[ShapeResult(shape={"m": 4}, ok=status == "ok", phase="benchmark", time_us=us)],
                      device={"name": "cpu"}, timing_label="cpu interpreter (host clock)", failing_shape=None)


def test_new_database_is_wal_with_versioned_schema(tmp_path):
    path = tmp_path / "k.db"
    Store(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "candidates", "plans", "findings", "llm_calls", "events"} <= tables


def test_run_and_candidates_round_trip_and_survive_reopening(tmp_path):
    path = tmp_path / "k.db"
    with Store(path) as store:
        run_id = _run(store, name="first")
        seed = store.add_candidate(run_id, kind="seed", source="S", hypothesis="seed kernel", iteration=0)
        child = store.add_candidate(run_id, kind="child", source="C", hypothesis="h", iteration=1,
                                    parent_id=seed.id, write_mode="edit", edits_total=3, edits_applied=2)
        assert seed.status == PENDING and (seed.seq, child.seq) == (1, 2)
        store.record_result(seed.id, _result(us=200.0))
        store.record_result(child.id, _result(us=150.0))
    with Store(path) as store:
        assert run_id.startswith("r-") and len(run_id) == 10
        row = store.run(run_id)
        assert row.name == "first" and row.status == "running" and row.config == {"iterations": 2}
        cands = store.candidates(run_id)
        assert [c.id for c in cands] == [seed.id, child.id]
        assert cands[1].parent_id == seed.id and cands[1].edits_applied == 2
        assert cands[1].result.shapes[0].time_us == 150.0 and cands[1].evaluated is not None
        listed = run_listing(store)[0]
        assert (listed.n_candidates, listed.best_us, listed.seed_us) == (2, 150.0, 200.0)


def test_runs_are_listed_newest_first(tmp_path):
    with Store(tmp_path / "k.db") as store:
        ids = [_run(store) for _ in range(3)]
        assert [r.id for r in store.list_runs()] == ids[::-1]


def test_plans_findings_events_and_calls(tmp_path):
    with Store(tmp_path / "k.db") as store:
        run_id = _run(store)
        plans = [{"title": f"plan {i}", "chosen": i < 3, "why_chosen": "", "predicted_min_pct": 1.0,
                  "predicted_max_pct": 5.0} for i in range(5)]
        rows = store.add_plans(run_id, 1, base_id="c-1", reference_id=None, justification="fastest", plans=plans)
        assert [r.position for r in rows] == list(range(5)) and sum(r.chosen for r in rows) == 3
        assert store.plans(run_id)[4].plan["title"] == "plan 4"
        store.add_finding(run_id, plan_id=rows[0].id, candidate_id=None, iteration=1, text="faster",
                          predicted_min_pct=1.0, predicted_max_pct=5.0, measured_pct=3.0)
        assert store.findings(run_id)[0].measured_pct == 3.0
        seqs = [store.add_event(run_id, "stage_changed", {"stage": s}) for s in ("seed", "select", "design")]
        assert [e["payload"]["stage"] for e in store.events(run_id)] == ["seed", "select", "design"]
        assert [e["seq"] for e in store.events(run_id, after_seq=seqs[0])] == seqs[1:]
        call = LLMCall(role="writer", model="m", prompt="p", response="r", input_tokens=10, output_tokens=5,
                       latency_s=0.1, cost_usd=0.5)
        store.add_llm_call(run_id, call)
        store.add_llm_call(run_id, replace(call, error="down", cost_usd=0.0, priced=False))
        usage = store.llm_usage(run_id)
        assert usage == LlmUsage(calls=2, tokens=30, cost_usd=0.5, errors=1, unpriced=1, offline_calls=0)
        store.add_llm_call(run_id, replace(call, model="offline", cost_usd=0.0, priced=False))
        usage = store.llm_usage(run_id)  # the offline scientist's answers spend no model's tokens
        assert usage == LlmUsage(calls=2, tokens=30, cost_usd=0.5, errors=1, unpriced=1, offline_calls=1)


def test_a_failing_plan_round_stores_nothing(tmp_path):
    with Store(tmp_path / "k.db") as store:
        run_id = _run(store)
        plans = [{"title": "fine", "chosen": True}, {"title": None, "chosen": True}]  # NOT NULL violated
        with pytest.raises(StoreError):
            store.add_plans(run_id, 1, base_id="c-1", reference_id=None, justification="", plans=plans)
        assert store.plans(run_id) == []


def test_credentials_in_the_environment_never_reach_the_file(tmp_path, monkeypatch):
    secret = "sk-test-9f8e7d6c5b4a39281706"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    path = tmp_path / "k.db"
    with Store(path) as store:
        run_id = _run(store)
        store.add_llm_call(run_id, LLMCall(role="writer", model="m", prompt=f"key {secret}", response=secret,
                                           input_tokens=1, output_tokens=1, latency_s=0.0, cost_usd=0.0,
                                           error=f"401 for {secret}"))
        store.update_run(run_id, status="failed", error=f"bad key {secret}")
        store.add_event(run_id, "run_failed", {"error": secret})
        assert store.llm_calls(run_id)[0]["prompt"] == "key [redacted]"
    data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert secret.encode() not in data


@pytest.mark.parametrize("content", [b"this is not a database at all, just text" * 100, b"\x00" * 4096])
def test_a_file_that_is_not_sqlite_is_a_one_line_error(tmp_path, content):
    path = tmp_path / "junk.db"
    path.write_bytes(content)
    with pytest.raises(StoreError) as err:
        Store(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_foreign_and_newer_databases_are_refused(tmp_path):
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE notes (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a kscience one"):
        Store(other)
    newer = tmp_path / "newer.db"
    db = sqlite3.connect(newer)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer kscience"):
        Store(newer)
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "missing" / "k.db")


def test_unknown_run_and_status_are_errors(tmp_path):
    with Store(tmp_path / "k.db") as store:
        with pytest.raises(StoreError, match="no run 'r-00000000'"):
            store.run("r-00000000")
        run_id = _run(store)
        with pytest.raises(ValueError):
            store.update_run(run_id, status="sleeping")


def test_threads_and_a_second_connection_see_committed_rows(tmp_path):
    path = tmp_path / "k.db"
    with Store(path) as store:
        run_id = _run(store)

        def write(n):
            for i in range(20):
                store.add_event(run_id, "stage_changed", {"n": n, "i": i})

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with Store(path) as reader:  # another process would open its own connection like this
            events = reader.events(run_id)
        assert len(events) == 80
        for n in range(4):  # each thread's events keep their order
            assert [e["payload"]["i"] for e in events if e["payload"]["n"] == n] == list(range(20))


def test_a_write_returns_the_candidate_as_a_read_of_it_gives_it_without_reading_it_back(tmp_path):
    """The run keeps what the store's writes return (kscience.run.journal): each must equal a later read of the
    row, and a verdict stays the very EvalResult the evaluator gave, with the run's notes beside it."""
    with Store(tmp_path / "k.db") as store:
        run_id = _run(store)
        written = store.add_candidate(run_id, kind="seed", source="S", hypothesis="seed", iteration=0,
                                      deviations="kept the tile size")
        assert written == store.candidate(written.id) and written.result is None
        result = _result(us=120.0)
        judged = store.record_result(written, result, {"step_limit_s": 60.0})
        read = store.candidate(written.id)
        assert judged == read and judged.to_row() == read.to_row() and judged.result is result
        assert judged.notes == read.notes == {"step_limit_s": 60.0} and read.result == result
        again = store.judge_again(judged)
        assert again == store.candidate(written.id) and again.status == PENDING and again.result is None
        with pytest.raises(StoreError, match="no candidate"):
            store.record_profile("c-missing", profile_s=1.0)


def test_plan_finding_and_profile_writes_return_the_typed_rows_a_read_gives(tmp_path):
    """The journal keeps these returns as the run's rows, so each is the record a later read builds."""
    with Store(tmp_path / "k.db") as store:
        run_id = _run(store)
        seed = store.add_candidate(run_id, kind="seed", source="S", hypothesis="seed", iteration=0)
        plans = store.add_plans(run_id, 1, base_id=seed.id, reference_id=None, justification="fastest",
                                plans=[{"title": "tile", "chosen": True, "measure": ["ncu"]}])
        assert plans == store.plans(run_id) and isinstance(plans[0], PlanRow) and plans[0].plan["measure"] == ["ncu"]
        finding = store.add_finding(run_id, plan_id=plans[0].id, candidate_id=seed.id, iteration=1, text="faster",
                                    predicted_min_pct=1.0, predicted_max_pct=5.0, measured_pct=3.0)
        assert isinstance(finding, FindingRow) and [finding] == store.findings(run_id)
        profile = store.record_profile(seed.id, compile_facts=[{"name": "k"}], profile_s=2.0)
        assert isinstance(profile, ProfileRow) and profile == store.profile(seed.id) == store.profiles(run_id)[0]
        assert store.record_profile(seed.id, flag="idle").compile_facts == [{"name": "k"}]  # kept beside the flag
