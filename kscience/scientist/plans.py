"""Experiment plans: what the designer proposes, how its answer is read, which plans are carried out,
and how a plan's prediction reads against what was measured.

Following the GPU Kernel Scientist (Andrews & Witteveen, 2025): five plans with a predicted uplift
range and an innovation score, of which three are chosen: the most innovative, the highest
predicted maximum and the highest predicted minimum.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

from kscience.scientist.llm.base import LLMError, one_line
from kscience.scientist.strategy import OK

PLANS_WANTED = 5


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


def parse_plans(text: str) -> list[Plan]:
    """The designer's valid plans (at most five, distinct titles); LLMError if there is none."""
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
    return plans[:PLANS_WANTED]


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


def choose_untaken(plans: list[Plan], taken: Iterable[str]) -> list[Plan]:
    """Lines designing on one base at once: when a chosen plan is titled as an experiment carried
    out or under way there (`taken`), choose again by the rules among the plans not taken; plans
    that clash with nothing keep the designer's choice."""
    taken_keys = {_title_key(t) for t in taken}
    if any(p.chosen and _title_key(p.title) in taken_keys for p in plans):
        mark_chosen(plans, taken)
    return plans


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
