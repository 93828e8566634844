-- Schema 3: profiles (what a profiler saw of a candidate). Older candidates have none.
CREATE TABLE profiles (
    candidate_id TEXT PRIMARY KEY REFERENCES candidates(id), run_id TEXT NOT NULL REFERENCES runs(id),
    compile_facts TEXT, ncu TEXT, sol TEXT, flag TEXT, profile_s REAL, updated REAL NOT NULL);
CREATE INDEX profiles_by_run ON profiles(run_id);
