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

    async def evaluate(self, cand, line=0, *, counted=True, profile_beside=False):
        return self.journal.record_result(cand.id, Verdict(EvalResult(status="wrong_answer", message="off by one"), {}))


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


def test_the_run_modules_import_one_another_in_one_direction_even_for_type_hints():
    """No circle among kscience/run's modules, counting every import a module makes (inside TYPE_CHECKING
    blocks and functions too): the controller's parts are given what they use, so none needs its caller."""
    import ast
    from pathlib import Path

    import kscience.run

    folder = Path(kscience.run.__file__).parent
    imports: dict[str, set[str]] = {}
    for path in folder.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found |= {n.split(".")[2] for n in names if n.startswith("kscience.run.") and n.count(".") >= 2}
        imports[path.stem] = found & {p.stem for p in folder.glob("*.py")} - {path.stem}

    def circle_from(start: str, at: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(imports.get(at, ())):
            if nxt == start:
                return (*seen, nxt)
            if nxt not in seen:
                found = circle_from(start, nxt, (*seen, nxt))
                if found:
                    return found
        return None

    circles = [c for c in (circle_from(m, m, (m,)) for m in sorted(imports)) if c]
    assert not circles, " ; ".join(" -> ".join(c) for c in circles)
    assert "line" not in imports["composing"] and "judging" in imports["line"]  # the circle once closed here
