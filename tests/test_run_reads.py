"""A run keeps its own rows in memory: it writes each through to the store and reads the candidates table
back only when it opens (a resume), so one verdict costs at most one read of that table, however many
parts of the run (budget, composer, population, lines, confirmation) look at the candidates after it.

Reads are counted as the SQL statements SQLite runs that select candidate rows (a `count(*)` for a new row's
sequence number reads no row), against the verdicts the run announced; its plans and findings, which it also
keeps, are read whole as often however many rounds it designs.
"""

import re

import pytest

from test_loop import FakeExecutor, ScriptedScientist, make_run

from kscience.record.store import Store
from kscience.run.config import RunConfig
from kscience.run.driver import Run
from kscience.run.events import CandidateEvaluated

ROW_READ = re.compile(r"^\s*SELECT\s+(?!count\(\*\)).*\b(FROM|JOIN)\s+candidates\b", re.IGNORECASE | re.DOTALL)
DESIGN_READ = re.compile(r"^\s*SELECT\s.*\bFROM\s+(plans|findings)\s+WHERE\s+run_id\b", re.IGNORECASE | re.DOTALL)


class Reads:
    """Counts the candidate-row reads of a store's connection, and the verdicts of the run it watches."""

    def __init__(self, run: Run):
        self.rows = 0
        self.designs = 0  # whole reads of the run's plans or findings
        self.verdicts = 0
        run.store._db.set_trace_callback(self._statement)
        run.subscribe(self._event)

    def _statement(self, sql: str) -> None:
        self.rows += bool(ROW_READ.match(sql))
        self.designs += bool(DESIGN_READ.match(sql))

    def _event(self, event) -> None:
        self.verdicts += isinstance(event, CandidateEvaluated)


def _scripted_run(tmp_path, iterations: int, lines: int) -> Reads:
    tmp_path.mkdir()
    run = make_run(tmp_path, ScriptedScientist(broken={"x0.8"}), FakeExecutor(capacity=2), iterations=iterations,
                   lines=lines, repairs=1)
    reads = Reads(run)
    assert run.start(background=False).status == "finished"
    return reads


@pytest.mark.parametrize("lines", [1, 3])
def test_one_verdict_costs_at_most_one_read_of_the_candidates_table(tmp_path, lines):
    short, long = _scripted_run(tmp_path / "short", 1, lines), _scripted_run(tmp_path / "long", 4, lines)
    assert long.verdicts >= 12  # seed, eager and four rounds of three children, with repairs
    assert long.rows <= long.verdicts, f"{long.rows} reads of the candidates table for {long.verdicts} verdicts"
    # read when the run opens and once for its closing summary: more verdicts add no read, nor more designs
    assert long.verdicts > short.verdicts and long.rows == short.rows and long.designs == short.designs


def test_the_offline_scientist_reads_the_table_at_most_once_per_verdict(tmp_path):
    run = Run.create(RunConfig(problem="softmax", iterations=3, seed=3), store=Store(tmp_path / "k.db"),
                     executor=FakeExecutor(delay_s=0))
    reads = Reads(run)
    assert run.start(background=False).status == "finished"
    assert reads.verdicts >= 5
    assert reads.rows <= reads.verdicts, f"{reads.rows} reads of the candidates table for {reads.verdicts} verdicts"


def test_a_resumed_run_reads_what_it_stored_and_goes_on_from_there(tmp_path):
    run = make_run(tmp_path, ScriptedScientist(), iterations=1)
    assert run.start(background=False).status == "finished"
    before = [c.to_row() for c in run.store.candidates(run.id)]
    resumed = Run.resume(run.id, store=run.store, iterations=1, scientist=ScriptedScientist(),
                         executor=FakeExecutor())
    reads = Reads(resumed)
    assert resumed.start(background=False).status == "finished"
    rows_read, verdicts = reads.rows, reads.verdicts
    after = run.store.candidates(run.id)
    assert [c.to_row() for c in after[:len(before)]] == before  # what the first session stored, untouched
    assert len(after) == len(before) + 3
    assert verdicts == 3 and 1 <= rows_read <= verdicts + 1  # its opening read of what was stored, then as fresh


def test_a_verdict_stays_the_evaluators_result_until_the_store_writes_it(tmp_path, monkeypatch):
    """One conversion of a verdict in the run's process, at the store: the executor's EvalResult is turned into
    its stored JSON once and never rebuilt from a dict (the FakeExecutor judges in this process, so no process
    boundary adds a conversion of its own), and no stored row is parsed back into a result while the run goes."""
    from kscience.evaluate.result import EvalResult
    from kscience.record import candidate

    counts = {"to_dict": 0, "from_dict": 0, "parsed": 0}
    to_dict, from_dict, parsed = EvalResult.to_dict, EvalResult.from_dict.__func__, candidate.result_from_stored

    def counting(name, call):
        def counted(*args, **kwargs):
            counts[name] += 1
            return call(*args, **kwargs)
        return counted

    monkeypatch.setattr(EvalResult, "to_dict", counting("to_dict", to_dict))
    monkeypatch.setattr(EvalResult, "from_dict", classmethod(counting("from_dict", from_dict)))
    monkeypatch.setattr(candidate, "result_from_stored", counting("parsed", parsed))
    run = make_run(tmp_path, ScriptedScientist(broken={"x0.8"}), iterations=2, repairs=1)
    reads = Reads(run)
    parsed_by_verdict = []
    run.subscribe(lambda e: parsed_by_verdict.append(counts["parsed"]) if isinstance(e, CandidateEvaluated) else None)
    assert run.start(background=False).status == "finished"
    assert counts["to_dict"] == reads.verdicts and counts["from_dict"] == 0
    assert len(parsed_by_verdict) == reads.verdicts and set(parsed_by_verdict) == {0}  # no stored row parsed back
