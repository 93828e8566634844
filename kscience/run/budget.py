"""The run's `--evaluations` budget: verdicts recorded plus evaluations asked for and not yet recorded.
Nothing is written that the budget could not judge, so every line asks `check()` before it writes."""

from __future__ import annotations

import contextlib

from kscience.run.journal import Journal, Stopped
from kscience.record.snapshot import judged_count


class EvaluationsSpent(Stopped):
    """The run's evaluation budget is spoken for: this line ends, its unjudged work stays for a resume."""


class EvaluationBudget:
    def __init__(self, journal: Journal, max_evaluations: int | None):
        self.journal, self.max_evaluations = journal, max_evaluations
        self._reserved = 0  # evaluations asked for and not yet recorded: they count against the budget

    def left(self) -> int | None:
        """Evaluations the budget still allows beyond those recorded and those in flight; None: no budget."""
        if self.max_evaluations is None:
            return None
        return self.max_evaluations - judged_count(self.journal.candidates()) - self._reserved

    def check(self) -> None:
        """Raise EvaluationsSpent when nothing more may be evaluated (before writing what cannot be judged)."""
        left = self.left()
        if left is not None and left <= 0:
            raise EvaluationsSpent(f"evaluation budget reached: {self.max_evaluations} evaluation(s)")

    @contextlib.contextmanager
    def spending(self, counted: bool):
        """An evaluation in flight: refused once the budget is spoken for, counted until its verdict is
        recorded. `counted=False` for the baselines, which the budget neither counts nor refuses."""
        if counted:
            self.check()
        self._reserved += counted
        try:
            yield
        finally:
            self._reserved -= counted
