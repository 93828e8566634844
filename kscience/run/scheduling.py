"""The lines' scheduling: up to `--lines` lines of work kept going at once (see kscience.run.line).

Interrupted iterations (chosen plans without a finding) are resumed first, each as a line of its own, then
new ones are started while the budgets allow. A line whose candidates are all written counts as free only
while the evaluator is faster than the model (both measured by this run), so its next iteration is designed
while they are judged; otherwise its next design waits for their verdicts and learns from them. Lines
waiting for work share one designer answer (kscience.run.sharing). `--iterations N` counts designs started
in total; the run also ends at its `--evaluations` budget, at `--stop-at-sol`, when nothing is left to try,
or on a stop.
"""

from __future__ import annotations

import asyncio

from kscience.problems import Problem
from kscience.run import profiling
from kscience.run.budget import EvaluationBudget, EvaluationsSpent
from kscience.run.journal import Journal, Stopped, Stopping
from kscience.run.judging import Judging
from kscience.run.line import Line, NothingLeft
from kscience.run.population import Population
from kscience.run.sharing import Sharing
from kscience.record.rows import PlanRow
from kscience.record.snapshot import best_candidate, iterations_done

AHEAD_PER_LINE = 2  # iterations one line may have going: one being judged while the next is designed


class LineScheduler:
    """Keeps `lines` lines going over `judging`'s slots; `changed` is set by each verdict recorded and each
    line whose candidates are all written: either may let it start a line. `repairs` is --repairs and
    `stop_at_sol` --stop-at-sol."""

    def __init__(self, *, journal: Journal, stopping: Stopping, budget: EvaluationBudget, judging: Judging,
                 population: Population, scientist, problem: Problem, repairs: int, lines: int,
                 stop_at_sol: float | None, changed: asyncio.Event):
        self.journal, self.stopping, self.budget, self.judging = journal, stopping, budget, judging
        self.population, self.scientist, self.problem, self.repairs = population, scientist, problem, repairs
        self.lines, self.stop_at_sol, self.changed = lines, stop_at_sol, changed
        self._last_claimed = 0  # the newest iteration number a line was given
        self.sharing = Sharing()  # pooled plans and designs under way (kscience.run.sharing)
        self._seeking: set[asyncio.Task] = set()  # line tasks that have no plans stored yet
        self._written: set[asyncio.Task] = set()  # line tasks whose candidates are all written
        self._ahead: set[asyncio.Task] = set()  # of those, the ones whose next iteration may be designed now
        self._line_of: dict[asyncio.Task, Line] = {}  # each line task's Line (its candidates awaiting a verdict)
        self.model_s: float | None = None  # how long a designer answer takes, smoothed

    async def schedule(self, target: int) -> str | None:
        """Keep up to `self.lines` lines going: first every interrupted iteration, then new ones while
        the budgets allow. Ends when no line is left, returning why the run is done (None: its iterations
        are); raises the first failure once all have committed."""
        tasks: dict[asyncio.Task, tuple[int, int]] = {}  # line task -> (its line number, its iteration)
        for rows in self._open_iterations():
            number = self._free_line(tasks)
            tasks[asyncio.create_task(self._resumed_line(number, rows))] = (number, rows[0].iteration)
        designing = self._seeking
        failure: BaseException | None = None
        stopped: Stopped | None = None
        spent: EvaluationsSpent | None = None
        exhausted_at: int | None = None  # population size when a line found nothing left to try
        ended: str | None = None
        woken: asyncio.Task | None = None
        try:
            while True:
                while (failure is None and stopped is None and spent is None and ended is None
                       and not self.stopping.requested()
                       and self._occupied(tasks) < self.lines and len(tasks) < AHEAD_PER_LINE * self.lines
                       and self.iterations_done() + len(designing) < target
                       and (exhausted_at is None or self._population_size() > exhausted_at)):
                    ended = profiling.stop_message(self.problem, best_candidate(self.journal.candidates()),
                                                   self.stop_at_sol)
                    if ended is not None:
                        break
                    try:
                        self.budget.check()
                    except EvaluationsSpent as exc:
                        spent = exc
                        break
                    number, iteration = self._free_line(tasks), self._next_iteration()
                    task = asyncio.create_task(self._new_line(number, iteration, designing))
                    designing.add(task)
                    tasks[task] = (number, iteration)
                if not tasks:
                    break
                # Woken when a line ends, when a verdict is recorded (a line that found nothing left to try
                # may find something on the new member) and when a line's candidates are all written.
                self.changed.clear()
                woken = asyncio.create_task(self.changed.wait())
                done, _ = await asyncio.wait([*tasks, woken], return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                for task in done & tasks.keys():
                    number, iteration = tasks.pop(task)
                    designing.discard(task)
                    self._written.discard(task)
                    self._ahead.discard(task)
                    self._line_of.pop(task, None)
                    # The dashboard shows each line's stage: this one has none now, unless the line
                    # already works on its next iteration.
                    if self.lines > 1 and number not in {n for n, _ in tasks.values()}:
                        self.journal.stage("line ended", iteration, "", number)
                    exc = task.exception()
                    if isinstance(exc, NothingLeft):
                        exhausted_at, ended = self._population_size(), str(exc)
                    elif isinstance(exc, EvaluationsSpent):
                        spent = spent or exc
                    elif isinstance(exc, Stopped):
                        stopped = stopped or exc
                    elif exc is not None:
                        failure = failure or exc
                        self.stopping.halt()
                if exhausted_at is not None and self._population_size() > exhausted_at and failure is None:
                    ended = None  # a line's new member may leave something to try: try again
        except asyncio.CancelledError:  # Ctrl-C: every line records what it can, then the stop goes through
            for task in [*tasks, *([woken] if woken else [])]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if failure is not None:
            raise failure
        if stopped is not None or self.stopping.requested():
            raise stopped or Stopped("stopped on request")
        return str(spent) if spent is not None else ended

    def line(self, number: int) -> Line:
        return Line(number, journal=self.journal, stopping=self.stopping, judging=self.judging, budget=self.budget,
                    population=self.population, scientist=self.scientist, sharing=self.sharing,
                    problem=self.problem, repairs=self.repairs, lines_waiting=self.lines_waiting,
                    note_model_time=self.note_model_time, several=self.lines > 1)

    async def _new_line(self, number: int, iteration: int, designing: set) -> None:
        line, me = self.line(number), asyncio.current_task()
        self._line_of[me] = line
        rows = await line.find_work(iteration)
        designing.discard(me)  # stored: counted by iterations_done from now on
        await line.experiments(rows, lambda: self._all_written(me))

    async def _resumed_line(self, number: int, rows: list[PlanRow]) -> None:
        line, me = self.line(number), asyncio.current_task()
        self._line_of[me] = line
        await line.experiments(rows, lambda: self._all_written(me))

    def _all_written(self, task: asyncio.Task) -> None:
        self._written.add(task)
        self.changed.set()

    def _design_ahead(self) -> bool:
        """Whether a line whose candidates are all written may start its next design while they are judged: only
        when the evaluator is faster than the model, as this run measured both, so that the verdicts asked for
        now are back before one designer answer (and reach the design after it). Otherwise, and until both are
        measured, the line waits for its verdicts and its next design learns from them; other lines, where the
        run has more than one, keep the slots busy meanwhile."""
        verdicts_in = self.judging.use.verdicts_in_s()
        return self.model_s is not None and verdicts_in is not None and verdicts_in < self.model_s

    def _occupied(self, tasks: dict) -> int:
        """Lines in use. A line whose candidates are all written becomes free, for good, once designing ahead pays
        while some of them still wait for a verdict; one whose verdicts are all in finishes its findings first,
        which its next design then reads."""
        if any(task in self._written and task not in self._ahead for task in tasks) and self._design_ahead():
            self._ahead |= {task for task in tasks if task in self._written and self._line_of[task].judged_now}
        return sum(task not in self._ahead for task in tasks)

    def lines_waiting(self) -> int:
        """Line tasks that have no plans yet: what one designer answer should supply."""
        return len(self._seeking)

    def note_model_time(self, seconds: float) -> None:
        self.model_s = seconds if self.model_s is None else 0.5 * (self.model_s + seconds)

    def _open_iterations(self) -> list[list[PlanRow]]:
        """The chosen plans without a finding, one list per iteration: each is resumed as a line."""
        found = {f.plan_id for f in self.journal.findings()}
        by_iteration: dict[int, list[PlanRow]] = {}
        for p in self.journal.plans():
            if p.chosen and p.id not in found:
                by_iteration.setdefault(p.iteration, []).append(p)
        return [by_iteration[i] for i in sorted(by_iteration)]

    def _free_line(self, tasks: dict) -> int:
        """The lowest line number not in use, so the dashboard's lines keep their numbers; a line designing
        ahead leaves its number to its next iteration."""
        used = {number for task, (number, _) in tasks.items() if task not in self._ahead}
        return next(n for n in range(1, len(used) + 2) if n not in used)

    def _next_iteration(self) -> int:
        """A new line's iteration number: after every stored one and every one claimed by a line."""
        stored = max((p.iteration for p in self.journal.plans()), default=0)
        self._last_claimed = max(self._last_claimed, stored) + 1
        return self._last_claimed

    def _population_size(self) -> int:
        return sum(c.result is not None for c in self.journal.candidates())

    def iterations_done(self) -> int:
        return iterations_done(self.journal.plans())
