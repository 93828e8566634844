-- Schema 2: a campaign id on runs, campaigns (a suite of problems, one run each) and retimes
-- (stored kernels judged again on another device, beside their original verdicts).
ALTER TABLE runs ADD COLUMN campaign_id TEXT;
CREATE TABLE campaigns (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, suite TEXT NOT NULL, config TEXT NOT NULL,
    status TEXT NOT NULL, pid INTEGER, host TEXT, created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE campaign_problems (
    campaign_id TEXT NOT NULL REFERENCES campaigns(id), position INTEGER NOT NULL, locator TEXT NOT NULL,
    name TEXT NOT NULL, overrides TEXT NOT NULL, status TEXT NOT NULL, reason TEXT, run_id TEXT,
    PRIMARY KEY (campaign_id, position));
CREATE TABLE retimes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id),
    candidate_id TEXT NOT NULL REFERENCES candidates(id), device TEXT NOT NULL, status TEXT NOT NULL,
    message TEXT NOT NULL, geomean_us REAL, result TEXT, created REAL NOT NULL);
CREATE INDEX retimes_by_run ON retimes(run_id, device);
