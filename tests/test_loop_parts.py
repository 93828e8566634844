"""The loop's parts work from what they are given: a line and the evaluation budget need the run's
journal, its stop, the budget and a judge, never the controller."""

import asyncio
import threading

import pytest

from kscience.evaluate.result import EvalResult
from kscience.record.store import Store
from kscience.run.budget import EvaluationBudget, EvaluationsSpent
from kscience.run.events import EventBus, StageChanged
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.run.verdict import Verdict
from kscience.run.line import Line


def _journal(tmp_path) -> tuple[Journal, list]:
    store = Store(tmp_path / "k.db")
    run_id = store.create_run(name="", problem="softmax", overrides={}, llm="offline", strategy="tournament",
                              config={}, environment={})
    seen = []
    bus = EventBus()
    bus.subscribe(seen.append)
    return Journal(store, run_id, bus), seen


class WrongAnswers:
    """A judge whose every verdict is a wrong answer."""

    def __init__(self, journal: Journal):
        self.journal = journal

    async def evaluate(self, cand, line=0, *, counted=True, profile_beside=False, verdict_in=lambda: None):
        judged = self.journal.record_result(cand.id, Verdict(EvalResult(status="wrong_answer", message="off by one"), {}))
        verdict_in()
        return judged


def test_a_line_stops_repairing_when_the_budget_is_spent_without_writing_a_repair(tmp_path):
    journal, seen = _journal(tmp_path)
    budget = EvaluationBudget(journal, max_evaluations=1)
    seed = journal.add_candidate(kind="seed", source="S", hypothesis="seed", iteration=0)
    line = Line(0, journal=journal, stopping=Stopping(threading.Event()), judging=WrongAnswers(journal),
                budget=budget, population=None, scientist=None, sharing=None, problem=None, repairs=3,
                lines_waiting=lambda: 0, note_model_time=lambda s: None)
    with pytest.raises(EvaluationsSpent, match="1 evaluation"):
        asyncio.run(line.settle([seed], iteration=0, plan_id=None, title="seed kernel"))
    assert [c.status for c in journal.candidates()] == ["wrong_answer"]  # judged once, no repair written
    assert budget.left() == 0 and not any(isinstance(e, StageChanged) and e.stage == "repair" for e in seen)


def test_an_evaluation_in_flight_counts_against_the_budget_and_baselines_never_do(tmp_path):
    journal, _ = _journal(tmp_path)
    budget = EvaluationBudget(journal, max_evaluations=1)
    with budget.spending(counted=True):
        assert budget.left() == 0
        with pytest.raises(EvaluationsSpent):
            budget.check()
        with budget.spending(counted=False):  # a baseline goes ahead
            assert budget.left() == 0
    assert budget.left() == 1 and EvaluationBudget(journal, None).left() is None


def test_a_stop_or_a_halt_stops_the_next_step():
    stop = threading.Event()
    stopping = Stopping(stop)
    stopping.check()
    stopping.halt()
    with pytest.raises(Stopped):
        stopping.check()
    assert not stopping.requested()
    stop.set()
    assert stopping.requested()
