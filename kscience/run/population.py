"""What the scientist sees of a run: its population as `CandidateView`s, the experiments chosen on a
base and the neighbourhood of one (its siblings' verdicts, the best, the findings), how the numbers were
measured and the rules the judge holds kernels to (`observe`). Read afresh from the run's journal each time,
so every line sees every verdict and finding recorded so far."""

from __future__ import annotations

from collections.abc import Callable

from kscience.evaluate import result as R
from kscience.problems import Problem
from kscience.run.baselines import vendor_title
from kscience.run.journal import Journal
from kscience.scientist import compose
from kscience.scientist.briefing import bench_from_results, coverage
from kscience.record.candidate import Candidate
from kscience.scientist.hardware import describe, run_target
from kscience.scientist.neighbourhood import Neighbour, Neighbourhood
from kscience.scientist.roles import CandidateView
from kscience.scientist.rules import Rules
from kscience.record.rows import ProfileRow
from kscience.record.seen import Seen
from kscience.record.snapshot import best_candidate
from kscience.record.store import BASELINE_KINDS


class Population:
    """`rules_of(interpreted)` gives the rules the run's judging enforces (kscience.run.judging.Judging.rules),
    set once the run judges; until then the scientist states the problem's defaults."""

    def __init__(self, journal: Journal, problem: Problem, scientist):
        self.journal, self.problem, self.scientist = journal, problem, scientist
        self.rules_of: Callable[[bool], Rules] | None = None

    def views(self) -> dict[str, CandidateView]:
        """Every evaluated candidate of the population (the baselines are not members)."""
        cands = [c for c in self.journal.candidates() if c.kind not in BASELINE_KINDS and c.result is not None]
        by_id = {c.id: c for c in cands}
        profiles = self.journal.profiles()
        children: dict[str, int] = {}
        for c in cands:
            children[c.parent_id] = children.get(c.parent_id, 0) + 1

        def depth(c: Candidate) -> int:
            d = 0
            while c.parent_id in by_id:
                c, d = by_id[c.parent_id], d + 1
            return d

        return {c.id: self.view(c, depth(c), children.get(c.id, 0), profiles.get(c.id)) for c in cands}

    def view(self, c: Candidate, depth: int = 0, n_children: int = 0, profile: ProfileRow | None = None) -> CandidateView:
        profile = Seen.of(profile or self.journal.profile(c.id), c.result)
        return CandidateView(
            id=c.id, parent_id=c.parent_id, hypothesis=c.hypothesis, status=c.status, geomean_us=c.geomean_us,
            source=c.source, message=c.message, shape_times=c.times, depth=depth, n_children=n_children,
            coverage=coverage(c.result, self.problem), profile=profile,
            failing_shape=c.result.failing_shape if c.result else None, deviations=c.deviations)

    def neighbourhood(self, base_id: str, *, plan_id: str | None = None, iteration: int | None = None,
                      of_the_base: bool = False) -> Neighbourhood:
        """Around an experiment on `base_id`: the other plans chosen on it (of `iteration` only, the same design,
        when given; never `plan_id` itself), each with its latest candidate, the best member, and every finding;
        `of_the_base`: also the base's own siblings, the other plans of the design that produced it."""
        cands = self.journal.candidates()
        views = self.views()
        latest = {c.plan_id: c for c in cands if c.plan_id}  # in seq order: a repair comes after what it repairs
        plans = [p for p in self.journal.plans() if p.chosen]

        def around(on: str, skip: str | None, of_iteration: int | None) -> list[Neighbour]:
            out = []
            for p in plans:
                if p.base_id == on and p.id != skip and of_iteration in (None, p.iteration):
                    c = latest.get(p.id)
                    out.append(Neighbour(p.title, None if c is None else views.get(c.id) or self.view(c)))
            return out

        base = next((c for c in cands if c.id == base_id), None)
        made_by = next((p for p in plans if base is not None and p.id == base.plan_id), None)
        best = best_candidate(cands)
        return Neighbourhood(
            siblings=around(base_id, plan_id, iteration), best=views.get(best.id) if best else None,
            findings=[f.text for f in self.journal.findings()],
            base_siblings=around(made_by.base_id, made_by.id, made_by.iteration)
            if of_the_base and made_by else [])

    def plans_on(self, base_id: str) -> tuple[list[str], list[str]]:
        """Titles of the experiments chosen on `base_id`: (carried out, under way in some line)."""
        found = {f.plan_id for f in self.journal.findings()}
        chosen = [p for p in self.journal.plans() if p.chosen and p.base_id == base_id]
        return [p.title for p in chosen if p.id in found], [p.title for p in chosen if p.id not in found]

    def observe(self) -> None:
        """Tell the scientist how the numbers were measured: the device and timing of the (repaired) seed,
        the spread of repeated calls, the baselines and the physical floor."""
        cands = self.journal.candidates()
        roots = [c for c in cands if c.iteration == 0 and c.kind in ("seed", "repair") and c.result]
        seed = next((c for c in reversed(roots) if c.status == R.OK), roots[-1] if roots else None)
        judged_on = seed.device if seed else R.DeviceRecord()
        device = describe(judged_on.kind, judged_on.name or "")
        target = getattr(self.scientist, "target", None) or run_target(None, device)
        kinds = {c.kind: c for c in cands}
        baselines = [(label, kinds[kind].result if kind in kinds else None) for kind, label in
                     (("eager", "PyTorch eager"), ("compiled", "torch.compile (max-autotune)"),
                      ("vendor", f"vendor library: {vendor_title(self.problem)}"),
                      ("vendor_alone", "the vendor call alone, its inputs made in its layout beforehand (not a rival: "
                                       "kernels get the problem's layout)"))
                     if kind not in ("vendor", "vendor_alone") or kind in kinds]
        baselines += [(f"installed library: {c.hypothesis}", c.result) for c in cands
                      if c.kind == "library"]
        best = best_candidate(cands)
        self.scientist.observe(bench_from_results(device, target, seed.result if seed else None, baselines,
                                                  seed.floor_times if seed else {},
                                                  leaders=compose.leaders_text(cands, best and best.id),
                                                  rules=self.rules_of(device.interpreted) if self.rules_of else None))
