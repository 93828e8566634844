"""A best that holds on one machine.

Results may come from several machines of one name (queue workers started per batch, Ray nodes, a run
resumed elsewhere), and two H100s differ by more than the noise of one: a kernel that looks faster
than the best may only have been timed on a faster machine, and a per-shape composite predicted from
parts timed on different machines may not be what it measures. So, once a run's verdicts come from
more than one host, every composite is judged again together with the current best, and so is the
member that looks fastest together with each close contender (slower by less than HOST_SPREAD) timed
on another host, a new best included: both requests are submitted at once so that one worker (one
batch, one node) takes them, both verdicts are replaced by those same-host figures, and the slower of
the two is marked as such (the record's best skips it from then on). That may
leave another member looking fastest: it is settled in turn, at most ROUNDS pairs after one verdict
and FINAL_ROUNDS when the session's lines have ended.
A pair that lands on two hosts TRIES times is left as it is, marked unconfirmed, and so is one that a run
judging through a batching queue ended before it could send (kscience.run.held). Each verdict keeps
the host that judged it (`device.host`, see kscience.device); `show` prints it beside each figure
once there is more than one.
"""

from __future__ import annotations

from dataclasses import replace

from kscience.evaluate import result as R
from kscience.record.store import BASELINE_KINDS
from kscience.run.verdict import Verdict
from kscience.scientist import compose
from kscience.record.candidate import Candidate

TRIES = 2  # pairs submitted before a candidate is kept with its figure marked unconfirmed
ROUNDS = 2  # pairs judged after one verdict before the best is left as it stands
FINAL_ROUNDS = 8  # pairs judged at the end of a session, so the run ends on a settled best
# How much slower than the best a kernel timed on another host may look and still be the faster one:
# machines of one name differ by more than their noise (two H100s have measured 14% apart).
HOST_SPREAD = 0.25


def hosts(cands: list[Candidate]) -> set[str]:
    """The hosts that judged the run's candidates so far (baselines included)."""
    return {c.host for c in cands if c.host}


def _members(cands: list[Candidate]) -> list[Candidate]:
    """Correct members not yet found slower than another on one host (those cannot be the best)."""
    return [c for c in cands if c.kind not in BASELINE_KINDS and c.ok and c.geomean_us
            and not c.notes.get("slower_than")]


def rival(composite: Candidate, cands: list[Candidate]) -> Candidate | None:
    """The best that a correct composite is judged beside, its parts having been timed wherever they
    were; None on one host or without another correct member."""
    if composite.kind != compose.KIND or not composite.ok or len(hosts(cands)) <= 1:
        return None
    others = [c for c in _members(cands) if c.id != composite.id]
    return min(others, key=lambda c: c.geomean_us, default=None)


def unsettled(cands: list[Candidate]) -> tuple[Candidate, Candidate] | None:
    """(the member that looks fastest, its closest contender timed on another host), where a contender is
    a member slower by less than HOST_SPREAD: the pair to judge on one host next. None when every
    contender was timed on the best's host (or all verdicts came from one)."""
    if len(hosts(cands)) <= 1:
        return None
    ok = _members(cands)
    if not ok:
        return None
    best = min(ok, key=lambda c: c.geomean_us)
    if best.notes.get("unconfirmed"):
        return None
    contenders = [c for c in ok if c is not best and c.host != best.host and not c.notes.get("unconfirmed")
                  and c.geomean_us < best.geomean_us * (1.0 + HOST_SPREAD)]
    return (best, min(contenders, key=lambda c: c.geomean_us)) if contenders else None


def confirmed(verdict: Verdict, other: Candidate, other_result: R.EvalResult, earlier: Candidate) -> Verdict:
    """`verdict` of a same-host pair, saying so, with the figure it replaces; marked `slower_than` the other
    where the other came out faster, which keeps it from being the best however figures from other hosts
    compare (and so every pair settles one member for good)."""
    result = verdict.result
    host = result.judged_on.host or "one host"
    notes = dict(verdict.notes, replaced={"geomean_us": earlier.result.geomean_us if earlier.result else None,
                                          "host": earlier.host})
    mine, theirs = result.geomean_us, other_result.geomean_us
    if other_result.status == R.OK and theirs and (result.status != R.OK or not mine or theirs < mine):
        notes["slower_than"] = other.id
    return Verdict(replace(result, message=f"judged back to back with {other.id} on {host}: {result.message}"), notes)


def unconfirmed(cand: Candidate, tries: int) -> Verdict:
    """`cand`'s verdict, its pairs having landed on different hosts `tries` times, saying so."""
    return _not_confirmed(cand, f"{tries} pair(s) judged on different hosts")


def skipped(cand: Candidate, why: str) -> Verdict:
    """`cand`'s verdict, its same-host pair never judged (the run ended first), saying so."""
    return _not_confirmed(cand, why)


def _not_confirmed(cand: Candidate, why: str) -> Verdict:
    return Verdict(replace(cand.result, message=f"not confirmed on one host ({why}): {cand.result.message}"),
                   dict(cand.notes, unconfirmed=True))
