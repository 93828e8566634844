"""Suites of runs, as papers report them: `campaign.py` (one run per problem under one id,
resumable as a whole), `scheduler.py` (its problems at once, sharing one executor's slots), `report.py`
(KernelBench's fast_p, geomean speedup, cost, into the typed rows of `report_rows.py`), `usage.py` (wall time, busy fraction, GPU-hours, tokens
and $, per problem and in total) and `retime.py` (stored kernels judged again on another device, set side
by side).
"""
