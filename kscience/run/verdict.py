"""A verdict as the run records it: the evaluator's `EvalResult` as it came back from the slot, and the run's
notes beside it (Candidate.notes: the limit per step it was judged under, kscience.run.limits; the marks of a
same-host pair, kscience.run.confirm). It stays in that form from the executor's reply to the store, which
turns it into the candidate's stored JSON once (Store.record_result); a verdict read from elsewhere (another
run's row, the baseline cache) becomes one where it comes in."""

from __future__ import annotations

from typing import NamedTuple

from kscience.evaluate.result import EvalResult


class Verdict(NamedTuple):
    result: EvalResult
    notes: dict
