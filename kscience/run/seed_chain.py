"""The seed's chain (the seed and the repairs of it, iteration 0) where it fails: judged again when it timed
out under a limit per step the resumed session raises, and, where it never passes, the error that stops the
run with what would get it further. A plain resume would judge it the same way, so that is never the advice."""

from __future__ import annotations

from collections.abc import Callable

from kscience.evaluate.result import TIMEOUT
from kscience.problems import Problem
from kscience.record.text import plural
from kscience.run.events import Notice
from kscience.run.journal import Journal
from kscience.run.limits import STEP_LIMIT_FACTOR, STEP_LIMIT_FLOOR_S, judged_under
from kscience.run.line import RunError
from kscience.record.candidate import Candidate
from kscience.scientist.rules import judge_limits_text


def judge_again(chain: list[Candidate], limit_now: Callable[[Candidate], float | None],
                journal: Journal) -> list[Candidate]:
    """The chain up to its first member that timed out under a smaller limit per step than `limit_now` gives it,
    that member made pending to be judged again (its earlier verdict stays in the run's events)."""
    for i, cand in enumerate(chain):
        before, now = judged_under(cand), limit_now(cand)
        if cand.status == TIMEOUT and before is not None and (now is None or now > before):
            limit = f"{now:g} s" if now is not None else f"the judge's own ({judge_limits_text()})"
            journal.emit(Notice(f"judging {cand.id} ({cand.kind}) again: it timed out under the {before:g} s limit "
                                f"per step, and this session's limit is {limit}"))
            return [*chain[:i], journal.judge_again(cand.id)]
    return chain


def seed_failure(chain: list[Candidate], journal: Journal, problem: Problem, repairs: int, model: str) -> RunError:
    """Why the run cannot start, with what would get it further: a larger --eval-timeout for a seed that timed
    out under one; else a new run from a seed that passes, or more repair attempts from a model."""
    seed, run_id, db = chain[0], journal.run_id, journal.store.path
    why = (f"the seed kernel does not pass ({seed.status}: {seed.message}) and {plural(repairs, 'repair attempt')} "
           "did not fix it")
    limits = [judged_under(c) for c in chain if c.status == TIMEOUT and judged_under(c) is not None]
    if limits:
        larger = max(STEP_LIMIT_FLOOR_S, STEP_LIMIT_FACTOR * max(limits))
        return RunError(f"{why}; it timed out under the {max(limits):g} s limit per step (--eval-timeout): resume "
                        f"with a larger one, e.g. kscience resume {run_id} --eval-timeout {larger:g} --db {db}",
                        advised=True)
    fix = f"check a fixed seed with `kscience eval {problem.locator} FILE`, then start a new run from it (--seed-kernel FILE)"
    if model.partition("@")[0] != "offline":  # the offline scientist repairs only the kernels it wrote
        fix += f", or give the model more attempts: kscience resume {run_id} --repairs {repairs + 2} --db {db}"
    return RunError(f"{why}; {fix}", advised=True)
