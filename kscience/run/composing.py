"""Per-shape composition during a run: where the run's correct kernels differ in which is fastest per
shape, a composite candidate dispatching by shape (kscience.scientist.compose) is written and judged
through the run's `Judging`, after every recorded verdict and once the roots are judged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kscience.problems import Problem
from kscience.run.budget import EvaluationBudget, EvaluationsSpent
from kscience.run.events import CandidateWritten, source_diff
from kscience.run.journal import Journal
from kscience.scientist import compose
from kscience.record.candidate import Candidate
from kscience.record.store import PENDING


class Composer:
    """`evaluate(cand, line)` judges a candidate as any other (Judging.evaluate)."""

    def __init__(self, journal: Journal, problem: Problem, budget: EvaluationBudget,
                 evaluate: Callable[[Candidate, int], Awaitable[Candidate]]):
        self.journal, self.problem, self.budget, self.evaluate = journal, problem, budget, evaluate
        # One composer at a time (lines record verdicts concurrently); a verdict recorded while it works
        # makes it look again rather than start a second one (see maybe_compose).
        self._composing, self._compose_again = False, False

    async def maybe_compose(self, iteration: int, line: int = 0) -> None:
        """Judge a pending composite (a resumed run), then build and judge a new one when the correct
        kernels differ in which is fastest per shape and no composite of the same parts and rules exists.
        Called after every recorded verdict and once the roots are judged. Lines record verdicts at once,
        so one caller composes at a time: a call while it works (its own composite's verdict included)
        only asks it to look again at the store once it is done, so no state is composed twice or missed."""
        self._compose_again = True
        if self._composing:
            return
        self._composing = True
        try:
            while self._compose_again:
                self._compose_again = False
                await self._compose(iteration, line)
        except EvaluationsSpent:  # the budget is spoken for: a composite is neither written nor judged
            pass
        finally:
            self._composing = False

    async def _compose(self, iteration: int, line: int) -> None:
        for cand in self.journal.candidates():
            if cand.kind == compose.KIND and cand.status == PENDING:
                await self.evaluate(cand, line)
        cands = self.journal.candidates()
        comp = compose.plan(self.problem, cands)
        if comp is None:
            return
        sources = {c.id: c.source for c in cands}
        text = compose.source(comp, sources)
        if any(c.source == text for c in cands):
            return
        self.budget.check()  # nothing is written that the budget could not judge
        self.journal.stage("compose", iteration, compose.summary(comp), line)
        cand = self.journal.add_composite(
            parts=comp.parts, rules=comp.to_dict(), kind=compose.KIND, source=text,
            hypothesis=compose.summary(comp), iteration=iteration, parent_id=comp.fallback)
        self.journal.emit(CandidateWritten(candidate_id=cand.id, parent_id=comp.fallback, kind=compose.KIND,
                                           iteration=iteration, plan_title=cand.hypothesis, status=cand.status,
                                           diff=source_diff(sources[comp.fallback], text)))
        await self.evaluate(cand, line)
