"""The store's rows besides candidates, as typed records: a run, a design round's plan, a finding, a profile,
an evaluation slot's busy time, LLM usage, a campaign, one of its problems and one of its sessions, a
re-timing.

Each is a frozen dataclass whose fields are the table's columns in the table's order (JSON columns parsed), so
`to_dict()` is the row exactly as stored: what `--json` output prints and a process boundary carries. The store
builds them (`from_row`), every layer above reads their fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


class Row:
    """What every row record shares: built from a stored row, given back as one."""

    @classmethod
    def from_row(cls, row: dict):
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in row.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RunRow(Row):
    """A run: what it works on, with which model and settings, and how it stands."""

    id: str
    name: str
    problem: str
    overrides: dict
    llm: str
    strategy: str
    status: str  # one of store.RUN_STATUSES; liveness.display_status says "interrupted" for a dead process
    config: dict
    environment: dict
    error: str | None
    pid: int | None
    host: str | None
    created: float
    updated: float
    campaign_id: str | None = None


@dataclass(frozen=True)
class PlanRow(Row):
    """One plan of a design round: the designer's experiment (`plan`, as it answered) and the selector's choice."""

    id: str
    run_id: str
    iteration: int
    position: int
    base_id: str
    reference_id: str | None
    justification: str
    title: str
    plan: dict
    chosen: int
    why_chosen: str
    predicted_min_pct: float | None
    predicted_max_pct: float | None
    created: float


@dataclass(frozen=True)
class FindingRow(Row):
    """What one experiment found, beside the uplift its plan predicted and the one its kernel measured."""

    id: int
    run_id: str
    plan_id: str
    candidate_id: str | None
    iteration: int
    text: str
    predicted_min_pct: float | None
    predicted_max_pct: float | None
    measured_pct: float | None
    created: float


@dataclass(frozen=True)
class ProfileRow(Row):
    """What a profiler saw of one candidate: compile facts, Nsight Compute counters, speed of light (the stored
    ShapeSol dicts), the 'not doing the work' flag and the seconds it took."""

    candidate_id: str
    run_id: str
    compile_facts: list | None
    ncu: dict | None
    sol: list | None
    flag: str | None
    profile_s: float | None
    updated: float


@dataclass(frozen=True)
class SlotTime(Row):
    """How busy one evaluation slot was in one session of a run (`session`: when it began)."""

    run_id: str
    session: float
    slot: int
    wall_s: float
    busy_s: float
    evaluations: int
    updated: float
    gpu_busy_s: float = 0.0  # the part of busy_s spent on evaluations judged on a GPU


@dataclass(frozen=True)
class LlmUsage(Row):
    """Model calls, their tokens and cost over every session of a run; the offline scientist's answers apart."""

    calls: int
    tokens: int
    cost_usd: float
    errors: int
    unpriced: int
    offline_calls: int


@dataclass(frozen=True)
class CampaignRow(Row):
    """A campaign: a suite of problems, one run each."""

    id: str
    name: str
    suite: str
    config: dict
    status: str
    pid: int | None
    host: str | None
    created: float
    updated: float


@dataclass(frozen=True)
class CampaignProblem(Row):
    """One problem of a campaign, with the run it made (None before it started, or when it was skipped)."""

    campaign_id: str
    position: int
    locator: str
    name: str
    overrides: dict
    status: str
    reason: str | None
    run_id: str | None


@dataclass(frozen=True)
class CampaignSession(Row):
    """How one session of a campaign used the slots its runs shared."""

    campaign_id: str
    session: float
    wall_s: float
    slots: int
    busy_s: float
    idle_waiting_s: float
    problems_at_once: int
    updated: float


@dataclass(frozen=True)
class RetimeRow(Row):
    """A stored kernel judged again on another device, beside its original verdict (`result`: EvalResult.to_dict())."""

    id: int
    run_id: str
    candidate_id: str
    device: str
    status: str
    message: str
    geomean_us: float | None
    result: dict | None
    created: float
