"""Profiles in the run store: compile facts, ncu metrics and speed of light per candidate (schema 2)."""

import sqlite3
from pathlib import Path

from kscience.evaluate.profile import compile_facts as cf
from kscience.evaluate.profile import ncu
from kscience.record.database import SCHEMA_VERSION
from kscience.record.store import Store

DATA = Path(__file__).parent / "data"


def _candidate(store: Store) -> tuple[str, str]:
    run_id = store.create_run(name="", problem="softmax", overrides={}, llm="offline", strategy="tournament",
                              config={}, environment={})
    return run_id, store.add_candidate(run_id, kind="seed", source="x = 1", hypothesis="seed", iteration=0).id


def test_profile_parts_arrive_separately_and_survive_reopening(tmp_path):
    path = tmp_path / "k.db"
    facts = [f.to_dict() for f in cf.read_triton_cache(DATA / "triton36_cache")]
    prof = ncu.parse((DATA / "ncu" / "h100_softmax_full_raw.csv").read_text()).to_dict()
    with Store(path) as store:
        run_id, cand = _candidate(store)
        assert store.profile(cand) is None
        first = store.record_profile(cand, compile_facts=facts, sol=[{"fraction": 0.5}])
        assert first.compile_facts == facts and first.ncu is None
        store.record_profile(cand, ncu=prof, profile_s=4.5, flag="not doing the work: x")  # later, for some
    with Store(path) as store:
        (row,) = store.profiles(run_id)
        assert row.candidate_id == cand and row.compile_facts == facts  # kept, not overwritten
        assert ncu.NcuProfile.from_dict(row.ncu).occupancy_pct == 87.43
        assert (row.sol, row.profile_s, row.flag) == ([{"fraction": 0.5}], 4.5, "not doing the work: x")


def test_a_schema_2_database_gains_the_table_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.db"
    with Store(path) as store:
        run_id, cand = _candidate(store)
    db = sqlite3.connect(path)  # make it what an older kscience wrote
    db.execute("DROP TABLE profiles")
    db.execute("DROP TABLE slot_times")  # schema 4
    db.execute("DROP TABLE compositions")  # schema 5
    db.execute("ALTER TABLE candidates DROP COLUMN deviations")  # schema 7
    db.execute("DROP TABLE campaign_sessions")  # schema 6
    db.execute("PRAGMA user_version=2")
    db.commit()
    db.close()
    with Store(path) as store:
        assert [c.id for c in store.candidates(run_id)] == [cand]
        store.record_profile(cand, profile_s=1.0)
        assert store.profile(cand).profile_s == 1.0
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
