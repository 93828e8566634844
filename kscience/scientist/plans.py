"""Experiment plans: what the designer proposes, how its answer is read, which plans are carried out,
and how a plan's prediction reads against what was measured.

Following the GPU Kernel Scientist (Andrews & Witteveen, 2025): five plans with a predicted uplift
range and an innovation score, of which three are chosen: the most innovative, the highest
predicted maximum and the highest predicted minimum. Where several lines of a run wait for work,
one answer holds plans for each of them: it is split into groups of three chosen by the same rules.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kscience.scientist.llm.base import LLMError, one_line
from kscience.scientist.strategy import OK

PLANS_WANTED = 5  # plans asked of a designer answer for one line
PLANS_PER_LINE = 3  # plans one line carries out: one per choice rule
AVENUES = (  # one favoured direction per design under way, so concurrent answers differ
    "memory traffic: fewer bytes moved, wider or coalesced accesses, reuse through registers or shared memory",
    "compute and tensor cores: fewer instructions per element, tensor-core instructions, cheaper math",
    "occupancy and launch shape: block and grid sizes, warps, stages, work per program",
    "algorithmic change: a different decomposition, fusion or order of the computation",
)


@dataclass
class Plan:
    title: str  # short name of the experiment
    rationale: str
    changes: list[str]  # rubric of concrete code changes
    predicted_min_pct: float  # predicted uplift range, % speedup vs base (negative allowed)
    predicted_max_pct: float
    innovation: int  # 1..10
    chosen: bool = False
    why_chosen: str = ""  # "most innovative" | "highest max" | "highest min"


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _plan_from(obj) -> Plan | None:
    """A Plan from one JSON object, or None when a required field is missing or unusable."""
    if not isinstance(obj, dict):
        return None
    title, rationale, changes = obj.get("title"), obj.get("rationale"), obj.get("changes")
    low, high = _number(obj.get("predicted_min_pct")), _number(obj.get("predicted_max_pct"))
    innovation = _number(obj.get("innovation"))
    if isinstance(changes, str):
        changes = [changes]
    if not (isinstance(title, str) and title.strip() and isinstance(rationale, str) and isinstance(changes, list)):
        return None
    changes = [c.strip() for c in changes if isinstance(c, str) and c.strip()]
    if not changes or low is None or high is None or innovation is None:
        return None
    low, high = min(low, high), max(low, high)
    return Plan(one_line(title, 120), rationale.strip(), changes, low, high, int(min(max(round(innovation), 1), 10)))


def parse_plans(text: str, limit: int = PLANS_WANTED) -> list[Plan]:
    """The designer's valid plans (at most `limit`, distinct titles); LLMError if there is none."""
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LLMError(f"designer answer is not JSON: {exc.msg} at line {exc.lineno}") from None
    raw = answer.get("plans") if isinstance(answer, dict) else answer
    plans, titles = [], set()
    for obj in raw if isinstance(raw, list) else []:
        plan = _plan_from(obj)
        if plan is not None and plan.title.lower() not in titles:
            plans.append(plan)
            titles.add(plan.title.lower())
    if not plans:
        raise LLMError("designer answer had no valid plan")
    return plans[:limit]


CHOICE_RULES = (  # (why_chosen, ranking key); each rule takes the best plan not chosen yet
    ("most innovative", lambda p: (p.innovation, p.predicted_max_pct)),
    ("highest max", lambda p: (p.predicted_max_pct, p.predicted_min_pct)),
    ("highest min", lambda p: (p.predicted_min_pct, p.predicted_max_pct)),
)


def _title_key(title: str) -> str:
    return " ".join(title.lower().split())


def mark_chosen(plans: list[Plan], done: Iterable[str] = ()) -> list[Plan]:
    """Mark up to three distinct plans chosen, one per rule; ties go to the plan listed first.
    A plan titled as an experiment already carried out on this base (`done`) is never chosen:
    its outcome is known, and the same edit would only rebuild a kernel already judged."""
    done_keys = {_title_key(t) for t in done}
    for plan in plans:
        plan.chosen, plan.why_chosen = False, ""
    for why, key in CHOICE_RULES:
        rest = [p for p in plans if not p.chosen and _title_key(p.title) not in done_keys]
        if rest:
            pick = max(rest, key=key)
            pick.chosen, pick.why_chosen = True, why
    return plans


def titled_as(plans: list[Plan], taken: Iterable[str]) -> list[Plan]:
    """The plans titled as an experiment in `taken`: proposed again, refused as duplicates."""
    keys = {_title_key(t) for t in taken}
    return [p for p in plans if _title_key(p.title) in keys]


def plans_wanted(groups: int) -> int:
    """Plans to ask one answer for when it is to keep `groups` lines busy: three for each, and two
    spare for the first so one line alone still chooses three of five, as the paper's designer does."""
    return PLANS_PER_LINE * groups + PLANS_WANTED - PLANS_PER_LINE


def split_into_groups(plans: list[Plan], taken: Iterable[str], groups: int) -> list[list[Plan]]:
    """Up to `groups` disjoint groups of chosen plans, none titled as an experiment in `taken`: first the
    designer's own choice where none of it is taken, then groups picked by the choice rules among the
    plans no earlier group took. Each plan is a copy."""
    used = {_title_key(t) for t in taken}
    out: list[list[Plan]] = []
    mine = [replace(p) for p in plans if p.chosen]
    if mine and groups > 0 and not any(_title_key(p.title) in used for p in mine):
        out.append(mine)
        used |= {_title_key(p.title) for p in mine}
    while len(out) < groups:
        rest = [replace(p) for p in plans if _title_key(p.title) not in used]
        chosen = [p for p in mark_chosen(rest) if p.chosen]
        if not chosen:
            break
        out.append(chosen)
        used |= {_title_key(p.title) for p in chosen}
    return out


def predicted_range(plan: Plan) -> str:
    return f"{plan.predicted_min_pct:+g}..{plan.predicted_max_pct:+g}%"


def measured_clause(plan: Plan, base_us: float | None, status: str, child_us: float | None) -> str:
    """Prediction against measurement in words, e.g. "+12.3% measured vs +5..+20% predicted"."""
    predicted = f"{predicted_range(plan)} predicted"
    if status != OK:
        return f"failed ({status}) vs {predicted}"
    if base_us and child_us:
        pct = (base_us / child_us - 1.0) * 100.0
        return f"{pct:+.1f}% measured ({base_us:.2f} -> {child_us:.2f} us) vs {predicted}"
    if child_us:
        return f"correct at {child_us:.2f} us, no base time to compare, vs {predicted}"
    return f"correct but untimed vs {predicted}"
