-- Schema 7: a writer's note on what it did otherwise than its plan, on the candidate it wrote. Older
-- candidates have none ('').
ALTER TABLE candidates ADD COLUMN deviations TEXT NOT NULL DEFAULT '';
