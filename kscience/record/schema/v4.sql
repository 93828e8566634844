-- Schema 4: slot_times (per evaluation slot and session of a run: how long an evaluation was in flight
-- on the slot, against the session's wall time). Runs of older files have none.
CREATE TABLE slot_times (
    run_id TEXT NOT NULL REFERENCES runs(id), session REAL NOT NULL, slot INTEGER NOT NULL,
    wall_s REAL NOT NULL, busy_s REAL NOT NULL, evaluations INTEGER NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY (run_id, session, slot));
