"""One line of work: select a base, design, then write -> evaluate -> repair -> finding per chosen plan.

A line is one iteration of the run: one group of chosen experiments (up to three, run as concurrent
tasks so their model calls overlap), from its own design or from another line's answer that was asked
for plans for several lines (kscience.run.sharing). The controller keeps up to `--lines` lines going
at once; each runs on its own clock and reads the shared population and every finding recorded
so far from the store when it needs them. Every step commits what it produced before the next one
starts, so a line dropped at any point is picked up by `resume` from the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, replace

from kscience.evaluate import result as R
from kscience.problems import Problem
from kscience.run.budget import EvaluationBudget
from kscience.run.events import CandidateWritten, FindingRecorded, HypothesesProposed, source_diff
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.run.judging import Judging
from kscience.run.population import Population
from kscience.scientist.briefing import coverage
from kscience.record.candidate import REPAIRABLE, Candidate
from kscience.run.sharing import Group, Sharing
from kscience.scientist.llm import NothingToPropose
from kscience.scientist.plans import plans_wanted, split_into_groups, titled_as
from kscience.scientist.roles import Plan
from kscience.record.rows import PlanRow
from kscience.record.seen import Seen
from kscience.record.store import PENDING, WRITE_FAILED
MAX_BASE_SWITCHES = 2  # other correct members tried as the base when the chosen one has nothing new left


class RunError(Exception):
    """The run cannot go on, for a reason that is not the LLM's: e.g. a seed kernel that never passes.
    `advised`: the message itself says what to do next (a resume with other settings, or a new run), in place
    of the plain advice to resume, which would only fail again."""

    def __init__(self, message: str, advised: bool = False):
        super().__init__(message)
        self.advised = advised


class NothingLeft(Exception):
    """No base has an experiment left that was not already carried out on it (or is under way)."""


class Line:
    """Line `number` (1..K) of a run (0: the seed's chain). It asks `lines_waiting()` how many lines want
    plans from its design, and reports how long each design took to `note_model_time`. `several`: the run
    keeps more than one line, so its designs name an avenue (a lone line's designs never run at once)."""

    def __init__(self, number: int, *, journal: Journal, stopping: Stopping, judging: Judging, budget: EvaluationBudget,
                 population: Population, scientist, sharing: Sharing, problem: Problem, repairs: int,
                 lines_waiting: Callable[[], int], note_model_time: Callable[[float], None], several: bool = True):
        self.number, self.journal, self.stopping, self.judging, self.budget = number, journal, stopping, judging, budget
        self.population, self.scientist, self.sharing = population, scientist, sharing
        self.problem, self.repairs, self.several = problem, repairs, several
        self.lines_waiting, self.note_model_time = lines_waiting, note_model_time
        self.judged_now = 0  # its candidates waiting for a verdict now (the controller reads it)

    def _stage(self, stage: str, iteration: int, detail: str = "") -> None:
        self.journal.stage(stage, iteration, detail, self.number)

    # --- a new iteration ---------------------------------------------------------------------
    async def find_work(self, iteration: int) -> list[PlanRow]:
        """This iteration's chosen plans, stored: a group another line's design left in the pool, else one
        from a design under way with a group to spare (waited for), else this line's own design."""
        sharing = self.sharing
        while True:
            group = sharing.take(lambda base_id: base_id in self.population.views())
            if group is not None:  # its plans may have been stored by a design on the same base since
                fresh = split_into_groups(group.plans, self._taken(group.base_id), 1,
                                          getattr(self.scientist, "chooser", "paper"))
                if fresh:
                    return self._store(iteration, group.base_id, group.reference_id, group.justification, fresh[0])
                continue
            design = sharing.joinable()
            if design is None:
                rows = await self.design(iteration)
                if rows is not None:
                    return rows
                continue
            design.claims += 1
            self._stage("waiting", iteration, f"for the design of line {design.line}")
            await design.answered.wait()

    def _taken(self, base_id: str) -> list[str]:
        """Titles carried out, under way or waiting in the pool on `base_id`."""
        done, in_flight = self.population.plans_on(base_id)
        return [*done, *in_flight, *self.sharing.pooled_titles(base_id)]

    def _store(self, iteration: int, base_id: str, reference_id: str | None, justification: str,
               plans: list[Plan]) -> list[PlanRow]:
        rows = self.journal.add_plans(iteration, base_id=base_id, reference_id=reference_id,
                                      justification=justification, plans=[asdict(p) for p in plans])
        self.journal.emit(HypothesesProposed(iteration=iteration, base_id=base_id, reference_id=reference_id,
                                             justification=justification,
                                             plans=[{"plan_id": r.id, **r.plan} for r in rows]))
        return [r for r in rows if r.chosen]

    async def design(self, iteration: int) -> list[PlanRow] | None:
        """Select a base and design on it, asking for plans for every line waiting for work; store this
        line's group (and the answer's plans no group took), pool the others, return this line's rows.
        None when every avenue is being designed on the selected base: after one of those answers, the
        line looks for work again (its plans, or a design that has them in view)."""
        sharing = self.sharing
        self.population.observe()
        views = self.population.views()
        population = list(views.values())
        # oldest first, from every line
        findings = [f.text for f in self.journal.findings()]
        self._stage("select", iteration)
        selection = await self.scientist.select(population, findings, taken=sharing.taken_bases())
        base = views.get(selection.base_id)
        justification = selection.justification
        if base is None or base.status != R.OK:  # the selector must build on a correct kernel
            base = min((v for v in population if v.status == R.OK), key=lambda v: v.geomean_us)
            justification = f"{justification} [selected {selection.base_id!r} is not a correct candidate; " \
                            f"using the fastest correct one, {base.id}]"
        reference = views.get(selection.reference_id) if selection.reference_id != base.id else None
        # Chosen with no await before `start`, so designs asked at once on one base favour different avenues.
        avenue = sharing.avenue_for(self.number, base.id) if self.several else ""
        if avenue is None:
            busy = sharing.designing_on(base.id)
            self._stage("waiting", iteration, f"for the design of line {busy.line} on {base.id}")
            await busy.answered.wait()
            return None
        groups_wanted = sharing.groups_wanted(self.lines_waiting())
        design = sharing.start(self.number, base.id, avenue, groups_wanted)
        pooled: list[Group] = []
        try:
            # Every finding so far: fitting them to the prompt's budget is the designer's job. A base with
            # nothing new to try gives way to the next correct member; when none has anything left, the
            # line ends rather than run an empty round.
            others = sorted((v for v in population if v.status == R.OK and v.id != base.id),
                            key=lambda v: v.geomean_us)
            tried, redesigned, order = [], set(), [base, *others[:MAX_BASE_SWITCHES]]
            while order:
                candidate = order.pop(0)
                if candidate is not base:
                    justification += f" [switched to {candidate.id}: nothing new to try on {base.id}]"
                    base, reference = candidate, None
                    design.base_id = base.id
                self._stage("design", iteration, f"base {base.id}")
                done, in_flight = self.population.plans_on(base.id)
                in_flight += sharing.pooled_titles(base.id)
                asked = time.monotonic()
                try:
                    plans = await self.scientist.design(base, reference, findings, done, in_flight,
                                                       wanted=plans_wanted(groups_wanted), avenue=avenue,
                                                       others=sharing.others(design),
                                                       neighbourhood=self.population.neighbourhood(
                                                           base.id, of_the_base=True))
                except NothingToPropose as exc:  # no experiment for this base at all: the next one
                    self._stage("no plan", iteration, str(exc))
                    tried.append(base.id)
                    continue
                self.note_model_time(time.monotonic() - asked)
                # Lines designing on one base at once may still propose alike: a plan another line stored
                # meanwhile is refused, and when nothing is left the base is designed on once more, now
                # with those plans in view as under way.
                taken = self._taken(base.id)
                # The scientist marks none chosen when all it proposes was carried out already.
                chooser = getattr(self.scientist, "chooser", "paper")
                groups = split_into_groups(plans, taken, groups_wanted, chooser) if any(p.chosen for p in plans) else []
                refused = [p.title for p in titled_as(plans, taken)]
                if refused:  # counted by benchmarks/search_throughput.py
                    self._stage("refused", iteration, f"{len(refused)} proposed plan(s) already taken on {base.id}: "
                                + "; ".join(refused))
                if not groups and len(taken) > len(done) + len(in_flight) and candidate.id not in redesigned:
                    redesigned.add(candidate.id)
                    order.insert(0, candidate)
                    continue
                if groups:
                    break
                tried.append(base.id)
            else:
                raise NothingLeft(f"iteration {iteration}: for {', '.join(tried)} the scientist proposed nothing "
                                  "that was not already carried out or under way there; nothing left to try")
            mine, spare = groups[0], groups[1:]
            handed = {p.title for g in spare for p in g}
            kept = {p.title: p for p in mine}
            stored = [kept.get(p.title) or replace(p, chosen=False, why_chosen="") for p in plans
                      if p.title not in handed]
            favouring = f"favouring {avenue.split(':')[0]}" if avenue else ""
            pooled = [Group(base.id, reference.id if reference else None,
                            f"{justification} [plans proposed in iteration {iteration}'s design by line "
                            f"{self.number}{', ' + favouring if favouring else ''}]", g) for g in spare]
            return self._store(iteration, base.id, reference.id if reference else None,
                               f"{justification} [{favouring}]" if favouring else justification, stored)
        finally:
            sharing.finish(design, pooled)

    # --- its experiments ---------------------------------------------------------------------
    async def experiments(self, plan_rows: list[PlanRow], written: Callable[[], None] = lambda: None) -> None:
        """Run plans concurrently; `written()` is called once every plan has its candidate written, so
        the controller may start this line's next design while they are judged. If one fails, every line
        stops after its current step; the first failure is raised once all of this line's experiments
        have committed what they finished."""
        unwritten = [len(plan_rows)]

        def one_written() -> None:
            unwritten[0] -= 1
            if unwritten[0] == 0:
                written()

        async def guarded(row: PlanRow) -> None:
            try:
                await self.experiment(row, one_written)
            except Stopped:
                raise
            except Exception:
                self.stopping.halt()
                raise

        outcomes = await asyncio.gather(*(guarded(r) for r in plan_rows), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        failures = [e for e in errors if not isinstance(e, Stopped)]
        if failures:
            raise failures[0]
        if errors:
            raise errors[0]

    async def experiment(self, row: PlanRow, written: Callable[[], None] = lambda: None) -> None:
        plan = Plan(**row.plan)
        iteration, views = row.iteration, self.population.views()
        base, reference = views[row.base_id], views.get(row.reference_id)
        chain = [c for c in self.journal.candidates() if c.plan_id == row.id]
        if not chain:
            self.stopping.check()
            self.budget.check()  # nothing is written that the budget could not judge
            self._stage("write", iteration, plan.title)
            draft = await self.scientist.write(plan, base, reference)
            chain = [self.add_draft(draft, kind="child", parent_id=base.id, parent_source=base.source,
                                    iteration=iteration, plan_id=row.id, hypothesis=plan.title)]
        written()
        final = await self.settle(chain, iteration=iteration, plan_id=row.id, title=plan.title)
        # A spent evaluation budget does not stop a judged chain's finding (its lesson is what the next
        # designer of any line needs); a user's stop does, and a resumed run records it.
        self.stopping.check()
        self._stage("finding", iteration, plan.title)
        self.population.observe()
        # its siblings are the other plans of the same design on the same base
        around = self.population.neighbourhood(base.id, plan_id=row.id, iteration=iteration)
        text = await self.scientist.finding(plan, base, final.status, final.geomean_us,
                                            child=self.population.view(final), neighbourhood=around)
        measured = final.uplift_over(base.geomean_us)
        self.journal.add_finding(plan_id=row.id, candidate_id=final.id, iteration=iteration, text=text,
                                 predicted_min_pct=plan.predicted_min_pct, predicted_max_pct=plan.predicted_max_pct,
                                 measured_pct=measured)
        self.journal.emit(FindingRecorded(plan_id=row.id, candidate_id=final.id, iteration=iteration, text=text,
                                          predicted_min_pct=plan.predicted_min_pct,
                                          predicted_max_pct=plan.predicted_max_pct, measured_pct=measured))

    async def settle(self, chain: list[Candidate], *, iteration: int, plan_id: str | None, title: str,
                     profile_beside: bool = False) -> Candidate:
        """Evaluate the chain's newest candidate if it is pending, then repair the newest broken one
        until a candidate passes or `repairs` attempts are used; return the chain's last candidate.
        `profile_beside`: see Judging.evaluate."""
        last = chain[-1]
        if last.status == PENDING:
            last = chain[-1] = await self._judged(last, profile_beside)
        attempts = sum(c.kind == "repair" for c in chain)
        while last.status in (*REPAIRABLE, WRITE_FAILED) and attempts < self.repairs:
            broken = next((c for c in reversed(chain) if c.status in REPAIRABLE), None)
            if broken is None:  # the first draft produced no source: nothing to repair
                break
            self.stopping.check()
            self.budget.check()
            attempts += 1
            self._stage("repair", iteration, f"{broken.id} ({broken.status}), attempt {attempts} of {self.repairs}")
            failing = broken.result.failing_shape if broken.result else None
            draft = await self.scientist.repair(broken.source, broken.status, broken.message, failing,
                                               attempts, coverage=coverage(broken.result, self.problem),
                                               profile=Seen.of(self.journal.profile(broken.id), broken.result))
            last = self.add_draft(draft, kind="repair", parent_id=broken.id, parent_source=broken.source,
                                  iteration=iteration, plan_id=plan_id, hypothesis=f"repair {attempts}: {title}",
                                  repair_attempt=attempts)
            chain.append(last)
            if last.status == PENDING:
                last = chain[-1] = await self._judged(last, profile_beside)
        return last

    async def _judged(self, cand: Candidate, profile_beside: bool) -> Candidate:
        """`judged_now` counts the candidate until its verdict is recorded, not until the work after it (what
        came back with it, a pair on one host, a profile) ends: the controller, woken by that verdict, must not
        count this line as one designing ahead while its verdicts are all in."""
        waiting = [True]

        def verdict_in() -> None:
            if waiting[0]:
                waiting[0] = False
                self.judged_now -= 1

        self.judged_now += 1
        try:
            return await self.judging.evaluate(cand, self.number, profile_beside=profile_beside, verdict_in=verdict_in)
        finally:
            verdict_in()

    def add_draft(self, draft, *, kind: str, parent_id: str, parent_source: str, iteration: int,
                  plan_id: str | None, hypothesis: str, repair_attempt: int = 0) -> Candidate:
        written = draft.source is not None
        cand = self.journal.add_candidate(
            kind=kind, source=draft.source or "", hypothesis=hypothesis, iteration=iteration,
            parent_id=parent_id, plan_id=plan_id, repair_attempt=repair_attempt,
            status=PENDING if written else WRITE_FAILED, message="" if written else (draft.error or "no source"),
            write_mode=draft.mode, edits_total=draft.edits_total, edits_applied=draft.edits_applied,
            deviations=draft.deviations)
        self.journal.emit(CandidateWritten(candidate_id=cand.id, parent_id=parent_id, kind=kind, iteration=iteration,
                                           plan_title=hypothesis, status=cand.status, message=cand.message,
                                           diff=source_diff(parent_source, draft.source) if written else ""))
        return cand
