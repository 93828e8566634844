-- Schema 6: the slot-seconds of each run's evaluations judged on a GPU (slot_times.gpu_busy_s), and
-- campaign_sessions (per session of a campaign: its wall time, the slots its runs shared, how long they were
-- held and how long one stood free while an evaluation waited). Older rows have 0 and no sessions.
ALTER TABLE slot_times ADD COLUMN gpu_busy_s REAL NOT NULL DEFAULT 0;
CREATE TABLE campaign_sessions (
    campaign_id TEXT NOT NULL REFERENCES campaigns(id), session REAL NOT NULL, wall_s REAL NOT NULL,
    slots INTEGER NOT NULL, busy_s REAL NOT NULL, idle_waiting_s REAL NOT NULL, problems_at_once INTEGER NOT NULL,
    updated REAL NOT NULL, PRIMARY KEY (campaign_id, session));
