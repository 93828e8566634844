"""What a run's lines share so that each works on something different.

Lines that start together on one base with one prompt propose the same plans. Here:

- one designer answer is asked for plans for every line waiting for work: its answer is split into
  groups of three (kscience.scientist.plans.split_into_groups), the designing line keeps the first and
  the rest wait in a pool; a line looking for work takes a pooled group, or waits for a design under
  way that has a group to spare, before it asks the model itself;
- each design under way is known to the others: its base (the selector is told which bases are
  taken) and its avenue, so no two lines send the same prompt, and each prompt names the avenue its
  line favours (AVENUES): designs under way at once on one base never share one, and a line whose
  base has every avenue under way waits for one of those answers rather than propose alike.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kscience.scientist.plans import AVENUES, Plan

MAX_GROUPS_PER_ANSWER = 4  # lines one answer is asked to supply (a longer answer is slower and worse)


@dataclass
class Group:
    """Plans designed for a line that no line has taken yet."""

    base_id: str
    reference_id: str | None
    justification: str
    plans: list[Plan]


@dataclass
class Design:
    """One designer call under way: which line asked, on what base, favouring what, for how many lines."""

    line: int
    base_id: str
    avenue: str
    groups: int
    claims: int = 1  # lines counting on one of its groups, the designing line included
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    def describe(self) -> str:
        return f"line {self.line} is designing on {self.base_id}, favouring {self.avenue.split(':')[0]}"


class Sharing:
    def __init__(self) -> None:
        self.pool: list[Group] = []
        self.designs: list[Design] = []

    def take(self, usable) -> Group | None:
        """The oldest pooled group whose base passes `usable(base_id)`; groups on unusable bases are dropped."""
        while self.pool:
            group = self.pool.pop(0)
            if usable(group.base_id):
                return group
        return None

    def joinable(self) -> Design | None:
        """A design under way with a group no waiting line has counted on yet."""
        return next((d for d in self.designs if d.claims < d.groups), None)

    def groups_wanted(self, waiting_lines: int) -> int:
        """How many lines a new answer should supply: the lines waiting for work that no design under way
        is counted on to supply (this one included), at most MAX_GROUPS_PER_ANSWER."""
        covered = sum(d.claims for d in self.designs)
        return max(1, min(MAX_GROUPS_PER_ANSWER, waiting_lines - covered))

    def avenue_for(self, line: int, base_id: str) -> str | None:
        """The line's own avenue, or the next one, among those no design under way on `base_id` favours,
        preferring one no design under way favours at all; None when every avenue is under way on it."""
        on_base = {d.avenue for d in self.designs if d.base_id == base_id}
        busy = {d.avenue for d in self.designs}
        free = [a for step in range(len(AVENUES)) if (a := AVENUES[(line - 1 + step) % len(AVENUES)]) not in on_base]
        return next((a for a in free if a not in busy), free[0] if free else None)

    def designing_on(self, base_id: str) -> Design | None:
        """The oldest design under way on `base_id`."""
        return next((d for d in self.designs if d.base_id == base_id), None)

    def start(self, line: int, base_id: str, avenue: str, groups: int) -> Design:
        design = Design(line, base_id, avenue, groups)
        self.designs.append(design)
        return design

    def finish(self, design: Design, groups: list[Group]) -> None:
        """The design answered (or failed: no groups): pool its spare groups and wake the lines counting on it."""
        self.pool.extend(groups)
        if design in self.designs:
            self.designs.remove(design)
        design.answered.set()

    def taken_bases(self, mine: Design | None = None) -> list[str]:
        """Bases other lines are designing on right now."""
        return list(dict.fromkeys(d.base_id for d in self.designs if d is not mine))

    def others(self, mine: Design | None = None) -> list[str]:
        """What the other designs under way are, in words, for a designer prompt."""
        return [d.describe() for d in self.designs if d is not mine]

    def pooled_titles(self, base_id: str) -> list[str]:
        return [p.title for g in self.pool if g.base_id == base_id for p in g.plans]
