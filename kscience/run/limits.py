"""How long the judge waits for a run's candidates: the default limit per step (from the seed's own
evaluation), and the limit each stored verdict was given under, so a timeout under a limit since raised is
judged again."""

from __future__ import annotations

from kscience.evaluate import result as R
from kscience.run.verdict import Verdict
from kscience.record.candidate import Candidate

# The default limit per step: a candidate may be this many times slower than the seed's slowest step (a
# first compile, autotuning, a slower shape), and never below the floor (autotuning many configurations, a busy
# machine).
STEP_LIMIT_FACTOR, STEP_LIMIT_FLOOR_S = 10.0, 60.0
CANDIDATE_STEPS = ("import", "check", "time", "recheck")  # the phases in which the candidate's code runs


def stored_verdict(result: R.EvalResult, request: R.EvalRequest) -> Verdict:
    """A verdict with the limit per step it was judged under (a timeout under a limit since raised is judged
    again on resume)."""
    return Verdict(result, {"step_limit_s": request.step_limit_s})


def judged_under(cand: Candidate) -> float | None:
    """The limit per step a candidate's verdict was given under; None: the judge's own limits (or not noted)."""
    return cand.notes.get("step_limit_s")


def step_limit(seed: Candidate | None) -> float | None:
    """The default per-step limit of a run's candidates: from its seed's own evaluation, None (the judge's own
    limits) until the seed was judged ok. The judge never raises its own limits for it."""
    if seed is None or not seed.ok or not seed.result:
        return None
    slowest = max((seed.result.phases_s.get(p, 0.0) for p in CANDIDATE_STEPS), default=0.0)
    return max(STEP_LIMIT_FACTOR * slowest, STEP_LIMIT_FLOOR_S)
