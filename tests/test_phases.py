"""An evaluation's phases (EvalResult.phases_s): a phase inside another counts for itself alone."""

import types

import kscience.evaluate.judge.phases as phases_module
from kscience.evaluate.judge.phases import Phases
from kscience.evaluate.judge.session import Session


def test_a_nested_phase_is_taken_out_of_the_phase_around_it(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(phases_module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    said = []
    session = Session.__new__(Session)  # the phase bookkeeping alone, no worker
    session.phases = Phases(said.append)
    with session.phase("check"):
        clock[0] += 1.0
        with session.phase("reference"):
            clock[0] += 2.0
            with session.phase("inputs"):
                clock[0] += 4.0
        with session.phase("inputs"):
            clock[0] += 8.0
    assert session.phases.seconds == {"check": 1.0, "reference": 2.0, "inputs": 12.0}
    assert sum(session.phases.seconds.values()) == clock[0] and session.phases._inner_s == []
    # what the judge is doing, told each time it changes (an evaluation's progress line names it)
    assert said == ["checking correctness", "running the reference", "building inputs", "running the reference",
                    "checking correctness", "building inputs", "checking correctness"]
