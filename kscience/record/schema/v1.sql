-- Schema 1: runs, their candidates (with lineage), plans, findings, model calls and events.
CREATE TABLE runs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, problem TEXT NOT NULL, overrides TEXT NOT NULL,
    llm TEXT NOT NULL, strategy TEXT NOT NULL, status TEXT NOT NULL, config TEXT NOT NULL,
    environment TEXT NOT NULL, error TEXT, pid INTEGER, host TEXT,
    created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE candidates (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), seq INTEGER NOT NULL,
    parent_id TEXT, kind TEXT NOT NULL, iteration INTEGER NOT NULL, plan_id TEXT,
    hypothesis TEXT NOT NULL, source TEXT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL,
    geomean_us REAL, result TEXT, repair_attempt INTEGER NOT NULL, write_mode TEXT,
    edits_total INTEGER NOT NULL, edits_applied INTEGER NOT NULL,
    created REAL NOT NULL, evaluated REAL);
CREATE INDEX candidates_by_run ON candidates(run_id, seq);
CREATE TABLE plans (
    id TEXT PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), iteration INTEGER NOT NULL,
    position INTEGER NOT NULL, base_id TEXT NOT NULL, reference_id TEXT, justification TEXT NOT NULL,
    title TEXT NOT NULL, plan TEXT NOT NULL, chosen INTEGER NOT NULL, why_chosen TEXT NOT NULL,
    predicted_min_pct REAL, predicted_max_pct REAL, created REAL NOT NULL);
CREATE INDEX plans_by_run ON plans(run_id, iteration, position);
CREATE TABLE findings (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id),
    plan_id TEXT NOT NULL, candidate_id TEXT, iteration INTEGER NOT NULL, text TEXT NOT NULL,
    predicted_min_pct REAL, predicted_max_pct REAL, measured_pct REAL, created REAL NOT NULL);
CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id),
    role TEXT NOT NULL, model TEXT NOT NULL, prompt TEXT NOT NULL, response TEXT NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, latency_s REAL NOT NULL,
    cost_usd REAL NOT NULL, priced INTEGER NOT NULL, error TEXT, created REAL NOT NULL);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id),
    type TEXT NOT NULL, payload TEXT NOT NULL, ts REAL NOT NULL);
CREATE INDEX events_by_run ON events(run_id, seq);
