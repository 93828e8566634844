-- Schema 5: compositions (a composite candidate's parts and the rules that pick among them by shape).
CREATE TABLE compositions (
    candidate_id TEXT PRIMARY KEY REFERENCES candidates(id), run_id TEXT NOT NULL REFERENCES runs(id),
    parts TEXT NOT NULL, rules TEXT NOT NULL, created REAL NOT NULL);
CREATE INDEX compositions_by_run ON compositions(run_id);
