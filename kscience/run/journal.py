"""What every part of a run's loop shares: where the run is recorded and announced (`Journal`), and
whether it should stop (`Stopping`). The controller makes one of each and hands them to its lines and
to `Judging`, so each part is given what it uses rather than the controller itself.

The run is the only writer of its candidates, their profiles, its plans and its findings, so the journal
keeps them in memory: it reads them from the store once, when the run opens (a resume finds its rows there),
and writes every change through to the store before anyone is told of it, for `kill -9` and for the readers
of the database while the run goes (the notebook, `kscience show`). What the run's parts read after a verdict
or a design is read from here."""

from __future__ import annotations

import threading

from kscience.run.events import Event, EventBus, StageChanged
from kscience.run.verdict import Verdict
from kscience.record.store import Store
from kscience.record.candidate import Candidate
from kscience.record.rows import FindingRow, PlanRow, ProfileRow


class Stopped(Exception):
    """A stop was requested (or another experiment failed); the run resumes later from the store."""


class Journal:
    """One run's rows and its event bus: every step commits to the store, then announces."""

    def __init__(self, store: Store, run_id: str, bus: EventBus):
        self.store, self.run_id, self.bus = store, run_id, bus
        self._candidates = {c.id: c for c in store.candidates(run_id)}  # in seq order, as stored
        self._profiles = {p.candidate_id: p for p in store.profiles(run_id)}
        self._plans = store.plans(run_id)
        self._findings = store.findings(run_id)

    # --- candidates ------------------------------------------------------------------------------
    def candidates(self) -> list[Candidate]:
        """The run's candidates in the order they were written."""
        return list(self._candidates.values())

    def candidate(self, cand_id: str) -> Candidate:
        return self._candidates[cand_id]

    def judged_with_source(self, source: str) -> Candidate | None:
        """The first candidate of the run with this very source that has a verdict."""
        return next((c for c in self._candidates.values() if c.source == source and c.result is not None), None)

    def add_candidate(self, **fields) -> Candidate:
        """A new candidate (Store.add_candidate's fields), stored."""
        return self._keep(self.store.add_candidate(self.run_id, **fields))

    def add_composite(self, *, parts: list[str], rules: dict, **fields) -> Candidate:
        """A composite candidate and what it is composed of (Store.add_composite), stored."""
        return self._keep(self.store.add_composite(self.run_id, parts=parts, rules=rules, **fields))

    def record_result(self, cand_id: str, verdict: Verdict) -> Candidate:
        """A verdict stored on its candidate; returns the candidate as now stored."""
        return self._keep(self.store.record_result(self._candidates[cand_id], verdict.result, verdict.notes))

    def judge_again(self, cand_id: str) -> Candidate:
        """The candidate made pending again (Store.judge_again)."""
        return self._keep(self.store.judge_again(self._candidates[cand_id]))

    def _keep(self, cand: Candidate) -> Candidate:
        self._candidates[cand.id] = cand
        return cand

    # --- profiles --------------------------------------------------------------------------------
    def profile(self, cand_id: str) -> ProfileRow | None:
        return self._profiles.get(cand_id)

    def profiles(self) -> dict[str, ProfileRow]:
        """Every profile of the run, by candidate id."""
        return dict(self._profiles)

    def record_profile(self, cand_id: str, **parts) -> ProfileRow:
        """What a profiler saw of a candidate (Store.record_profile's parts), stored beside what it had."""
        self._profiles[cand_id] = self.store.record_profile(cand_id, **parts)
        return self._profiles[cand_id]

    # --- plans and findings ----------------------------------------------------------------------
    def plans(self) -> list[PlanRow]:
        """Every plan of the run, by iteration and position (as Store.plans)."""
        return sorted(self._plans, key=lambda p: (p.iteration, p.position))

    def add_plans(self, iteration: int, **design) -> list[PlanRow]:
        """One design round's plans (Store.add_plans' fields), stored whole."""
        rows = self.store.add_plans(self.run_id, iteration, **design)
        self._plans += rows
        return rows

    def findings(self) -> list[FindingRow]:
        """Every finding of the run, oldest first."""
        return list(self._findings)

    def add_finding(self, **fields) -> FindingRow:
        """A finding (Store.add_finding's fields), stored."""
        self._findings.append(self.store.add_finding(self.run_id, **fields))
        return self._findings[-1]

    # --- events ----------------------------------------------------------------------------------
    def emit(self, event: Event) -> None:
        self.bus.publish(event)

    def stage(self, stage: str, iteration: int, detail: str = "", line: int = 0) -> None:
        self.emit(StageChanged(stage=stage, iteration=iteration, detail=detail, line=line))


class Stopping:
    """A user's stop (`Run.stop` sets the event), and a halt once one experiment failed: every line and
    evaluation stops at its next step."""

    def __init__(self, stop: threading.Event):
        self._stop = stop
        self._halted = False

    def requested(self) -> bool:
        return self._stop.is_set()

    def halt(self) -> None:
        self._halted = True

    def check(self) -> None:
        if self._stop.is_set() or self._halted:
            raise Stopped("stopped on request")
