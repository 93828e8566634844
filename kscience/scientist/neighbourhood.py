"""What a finding and a design see around their experiment: the other experiments of the same design on
the same base (each with its verdict, whole, or that it is not judged yet), the current best kernel with
its per-shape times, for a finding the findings recorded so far, and for a design the experiments made on
its base and those of the design that produced the base, all within stated budgets.

A finding that sees one result against its base can only say whether that result was better; with its
siblings and the best beside it, it can say why one of them won, which is the comparative lesson a
stateless model could not otherwise write. The run builds the `Neighbourhood` from the store
(kscience.run.population); this module only renders it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kscience.scientist.briefing import format_times
from kscience.record.candidate import uplift_pct
from kscience.scientist.quoting import fit_whole
from kscience.scientist.strategy import CandidateView
from kscience.scientist.verdicts import OK, verdict_clause

NEIGHBOURS_CHARS = 6000  # the sibling lines, newest last, each whole; the rest are counted


@dataclass
class Neighbour:
    title: str  # the plan it carries out
    view: CandidateView | None  # its latest candidate (after repairs); None while it has none judged


@dataclass
class Neighbourhood:
    siblings: list[Neighbour] = field(default_factory=list)
    best: CandidateView | None = None  # the run's fastest correct kernel
    findings: list[str] = field(default_factory=list)  # recorded so far, oldest first
    # For a design: the base's own siblings, the other experiments of the design that produced the base
    base_siblings: list[Neighbour] = field(default_factory=list)


def _time(view: CandidateView, base: CandidateView | None) -> str:
    pct = uplift_pct(base.geomean_us, view.geomean_us) if base is not None else None
    vs = f" ({pct:+.1f}% over the base)" if pct is not None else ""
    return f"geomean {view.geomean_us:,.2f} us{vs}; per shape: {format_times(view.shape_times)}"


def sibling_line(n: Neighbour, base: CandidateView | None) -> str:
    head = f"- plan \"{n.title}\""
    v = n.view
    if v is None or v.status in ("pending", ""):
        return f"{head}: not judged yet"
    if v.status == OK and v.geomean_us:
        return f"{head}: `{v.id}` ok, {_time(v, base)}"
    return f"{head}: `{v.id}` {verdict_clause(v.status, v.message, v.failing_shape) or v.status}"


def best_line(best: CandidateView | None, base: CandidateView | None) -> str:
    if best is None:
        return "Current best: none correct yet."
    same = " (the base itself)" if base is not None and best.id == base.id else ""
    return (f"Current best: `{best.id}`{same}, from \"{best.hypothesis}\", geomean {best.geomean_us:,.2f} us; "
            f"per shape: {format_times(best.shape_times)}.")


def siblings_text(siblings: list[Neighbour], base: CandidateView | None, budget: int = NEIGHBOURS_CHARS) -> str:
    """One line per sibling, whole, while they fit in `budget`; the rest counted."""
    lines, left = fit_whole([sibling_line(n, base) for n in siblings], budget)
    if left:
        lines.append(f"- ({left} more left out whole for the prompt budget of {budget} characters)")
    return "\n".join(lines) if lines else "- none"
