"""Suites of runs, as papers report them: `campaign.py` (one run per problem under one id,
resumable as a whole), `report.py` (KernelBench's fast_p, geomean speedup, cost) and `retime.py`
(stored kernels judged again on another device, set side by side).
"""
