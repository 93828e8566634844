"""Experiment plans: what the designer proposes, how its answer is read, which plans are carried out,
and how a plan's prediction reads against what was measured.

Following the GPU Kernel Scientist (Andrews & Witteveen, 2025): five plans with a predicted uplift
range and an innovation score, of which three are chosen: the most innovative, the highest
predicted maximum and the highest predicted minimum. Under the "loop" chooser the designer only
predicts, and the loop chooses by predicted upside and by distance from the plans already tried.
Where several lines of a run wait for work, one answer holds plans for each of them: it is split
into groups of three chosen by the same rules.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
import re
from dataclasses import dataclass, field, replace

from kscience.record.candidate import predicted_range, range_text, uplift_pct
from kscience.scientist.llm.base import LLMError
from kscience.scientist.measurements import parse_measure
from kscience.scientist.strategy import OK

PLANS_WANTED = 5  # plans asked of a designer answer for one line
PLANS_PER_LINE = 3  # plans one line carries out: one per choice rule
AVENUES = (  # one favoured direction per design under way, so concurrent answers differ
    "memory traffic: fewer bytes moved, wider or coalesced accesses, reuse through registers or shared memory",
    "compute and tensor cores: fewer instructions per element, tensor-core instructions, cheaper math",
    "occupancy and launch shape: block and grid sizes, warps, stages, work per program",
    "algorithmic change: a different decomposition, fusion or order of the computation",
)
# Who chooses the three plans carried out: "paper" (the GPU Kernel Scientist's rule over the designer's
# own scores, the method reproduced) or "loop" (the designer only predicts; the loop picks by predicted
# upside and by distance from plans tried or under way), so the two can be compared at equal budgets.
CHOOSERS = ("paper", "loop")


@dataclass
class Plan:
    title: str  # short name of the experiment
    rationale: str
    changes: list[str]  # rubric of concrete code changes
    predicted_min_pct: float  # predicted uplift range, % speedup vs base (negative allowed)
    predicted_max_pct: float
    innovation: int  # 1..10
    chosen: bool = False
    why_chosen: str = ""  # the rule that chose it (CHOICE_RULES, LOOP_RULES)
    measure: list[str] = field(default_factory=list)  # measurements asked for beyond those always returned
    refused: str = ""  # why it is never carried out (it leans on another plan its writer will not see)


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
    if innovation is None and "innovation" not in obj:
        innovation = 0  # not scored: the loop chooses (CHOOSERS)
    if isinstance(changes, str):
        changes = [changes]
    if not (isinstance(title, str) and title.strip() and isinstance(rationale, str) and isinstance(changes, list)):
        return None
    changes = [c.strip() for c in changes if isinstance(c, str) and c.strip()]
    if not changes or low is None or high is None or innovation is None:
        return None
    low, high = min(low, high), max(low, high)
    return Plan(" ".join(title.split()), rationale.strip(), changes, low, high,
                int(min(max(round(innovation), 1), 10)) if innovation else 0, measure=parse_measure(obj.get("measure")))


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
    return standalone(plans[:limit])


# A plan that leans on another ("as in the TF32 plan", "same as plan 2", "the previous plan"): its writer
# sees that plan alone, so the words it points with are all it would get.
_POINTER = re.compile(
    r"\b(?:as|like|same as|from|see|per|reuse[sd]?|following|extends|(?:based|built) on)\s+(?:in\s+)?(?:the\s+)?"
    r"(?P<named>(?:[\w/+.-]+\s+){1,3}?)plan\b"
    r"|\bplan\s*#?\s*(?P<number>\d+)\b"
    r"|\b(?P<order>previous|above|earlier|last|next)\s+plan\b", re.I)
_NOT_A_NAME = {"the", "a", "an", "in", "this", "that", "same", "whole", "our", "my", "its"}  # "as in this plan"


def _pointers(plan: Plan) -> list[re.Match]:
    text = " ".join([plan.rationale, *plan.changes])
    return [m for m in _POINTER.finditer(text)
            if m.group("named") is None or not set(m.group("named").lower().split()) <= _NOT_A_NAME
            and not set(m.group("named").lower().split()) & (_NOT_A_NAME - {"the", "a", "an", "in"})]


def _pointed_at(match: re.Match, plan: Plan, plans: list[Plan]) -> Plan | None:
    """The one other plan a pointer names: by its number ("plan 2"), by its place ("the previous plan") or
    by words of its title ("the TF32 plan"); None where it names none, or several."""
    here = plans.index(plan)
    if match.group("number"):
        i = int(match.group("number")) - 1
        return plans[i] if 0 <= i < len(plans) and i != here else None
    if match.group("order"):
        order = match.group("order").lower()
        i = here - 1 if order in ("previous", "above", "earlier", "last") else here + 1 if order == "next" else -1
        return plans[i] if 0 <= i < len(plans) and i != here else None
    words = _words(match.group("named")) - _NOT_A_NAME
    hits = [p for p in plans if p is not plan and words <= _words(" ".join([p.title, *p.changes]))]
    return hits[0] if len(hits) == 1 else None


def standalone(plans: list[Plan]) -> list[Plan]:
    """Every plan able to stand alone, as it reaches its writer: one that points at another plan of the
    answer gets that plan's title and changes written into its own where the pointer names one plan, and
    is refused (`refused`, never chosen) where it does not."""
    originals = {id(p): list(p.changes) for p in plans}
    for plan in plans:
        for m in _pointers(plan):
            other = _pointed_at(m, plan, plans)
            if other is None:
                plan.refused = (f"it points at another plan ({m.group(0)!r}) that its writer would not see, and "
                                "which plan is meant is not clear")
                break
            plan.changes += [f"(from the plan \"{other.title}\", which \"{m.group(0)}\" refers to) {c}"
                             for c in originals[id(other)]]
    return plans


CHOICE_RULES = (  # (why_chosen, ranking key); each rule takes the best plan not chosen yet
    ("most innovative", lambda p: (p.innovation, p.predicted_max_pct)),
    ("highest max", lambda p: (p.predicted_max_pct, p.predicted_min_pct)),
    ("highest min", lambda p: (p.predicted_min_pct, p.predicted_max_pct)),
)


TIES = ("Ties: for the most innovative, the higher predicted maximum wins; for the highest maximum, the higher "
        "minimum; for the highest minimum, the higher maximum; then the plan listed first. A plan that wins two "
        "rules is carried out once, and the later rule takes the best plan not yet chosen.")


def _title_key(title: str) -> str:
    return " ".join(title.lower().split())


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9_]+", text.lower()))


def distance(plan: Plan, others: list[set[str]]) -> float:
    """1 minus the largest word overlap (Jaccard) of the plan's title and changes with any of `others`;
    1.0 when there are none."""
    mine = _words(" ".join([plan.title, *plan.changes]))
    return 1.0 - max((len(mine & o) / len(mine | o) for o in others if mine | o), default=0.0)


def _mid(p: Plan) -> float:
    return (p.predicted_min_pct + p.predicted_max_pct) / 2


# The loop's rules when it chooses (CHOOSERS "loop"): by predicted upside (the middle of the range) and
# by distance from the plans tried or under way on this base and those already chosen in this round.
LOOP_RULES = (
    ("highest predicted upside", lambda p, far: (_mid(p), p.predicted_max_pct)),
    ("furthest from plans tried", lambda p, far: (far, _mid(p))),
    ("next highest upside, away from those", lambda p, far: (_mid(p) * (0.5 + far / 2), p.predicted_max_pct)),
)
LOOP_TIES = ("Ties go to the higher predicted maximum (for distance: the higher upside), then to the plan "
             "listed first.")


def choice_text(chooser: str = "paper", carried: str = "Three plans will be carried out") -> str:
    """How the plans carried out (`carried`: how many, by how many lines) are chosen, for the designer's prompt."""
    if chooser == "loop":
        return (f"{carried}, chosen by the loop from your predictions alone: the highest "
                "predicted upside (the middle of its range), the one furthest from the experiments already tried "
                "or under way on this base (by the words of its title and changes), and the next highest upside "
                f"weighed by its distance from those. {LOOP_TIES} So predict honestly; no score of yours is used.")
    return (f"{carried}: the most innovative, the one with the highest predicted maximum "
            f"and the one with the highest predicted minimum, so make the ranges honest. {TIES}")


def mark_chosen(plans: list[Plan], done: Iterable[str] = (), chooser: str = "paper") -> list[Plan]:
    """Mark up to three distinct plans chosen, one per rule; remaining ties go to the plan listed first.
    A plan titled as an experiment already carried out on this base (`done`) is never chosen:
    its outcome is known, and the same edit would only rebuild a kernel already judged."""
    done = list(done)
    done_keys = {_title_key(t) for t in done}
    for plan in plans:
        plan.chosen, plan.why_chosen = False, ""
    rules = LOOP_RULES if chooser == "loop" else [(why, lambda p, far, key=key: key(p)) for why, key in CHOICE_RULES]
    for why, key in rules:
        rest = [p for p in plans if not p.chosen and not p.refused and _title_key(p.title) not in done_keys]
        if rest:
            others = [_words(t) for t in done] + [_words(" ".join([p.title, *p.changes])) for p in plans if p.chosen]
            pick = max(rest, key=lambda p: key(p, distance(p, others)))  # max keeps the first of equals
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


def split_into_groups(plans: list[Plan], taken: Iterable[str], groups: int,
                      chooser: str = "paper") -> list[list[Plan]]:
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
        chosen = [p for p in mark_chosen(rest, (), chooser) if p.chosen]
        if not chosen:
            break
        out.append(chosen)
        used |= {_title_key(p.title) for p in chosen}
    return out


def predicted_text(plan: Plan) -> str:
    """The plan's predicted uplift as it states it: "+5..+20%"."""
    return range_text(predicted_range(plan.predicted_min_pct, plan.predicted_max_pct))


def measured_clause(plan: Plan, base_us: float | None, status: str, child_us: float | None,
                    verdict: str = "") -> str:
    """Prediction against measurement in words, e.g. "+12.3% measured vs +5..+20% predicted"; a failure
    says its `verdict` (verdicts.verdict_clause) where there is one, else its status."""
    predicted = f"{predicted_text(plan)} predicted"
    if status != OK:
        return f"failed ({verdict or status}) vs {predicted}"
    if base_us and child_us:
        pct = uplift_pct(base_us, child_us)
        return f"{pct:+.1f}% measured ({base_us:.2f} -> {child_us:.2f} us) vs {predicted}"
    if child_us:
        return f"correct at {child_us:.2f} us, no base time to compare, vs {predicted}"
    return f"correct but untimed vs {predicted}"
