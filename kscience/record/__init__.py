"""The record: what every run leaves behind, and the one reading of it that every view uses.

It sits just above the evaluator and imports nothing of the scientist, the run or anything above them: its
records are the types those layers hand each other. `candidate.py` (`Candidate`, one kernel and its verdict,
and the numbers read off it: per-shape times, speedups, uplifts, predicted ranges), `rows.py` (the other
tables' rows: runs, plans, findings, profiles, slot times, LLM usage, campaigns, re-timings), `seen.py` (`Seen`,
a stored profile with what the evaluation brought back beside it, as the scientist reads it), `llm_call.py`
(`LLMCall`, one exchange with a model), `store.py` (what a run writes and reads, in one SQLite file per set of
runs, as those records), `database.py` (that file: opening it, its schema versions in `schema/` and their
migration, transactions), `snapshot.py` (a stored run read back: best kernel, speedups, iterations, predicted
vs measured uplift), `metrics.py` (`RunMetrics`, the numbers `kscience show --json` reports), `text.py` (its
numbers and names as a reader sees them), `summary.py` (the end-of-run table) and `liveness.py` (whether the
process driving a run is alive).
"""
