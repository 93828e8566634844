"""The typed rows of a campaign's report (`report.py` computes them): one `ProblemRow` per problem, the suite's
`SuiteSummary`, and the `CampaignReport` that holds them with the campaign's usage.

`to_dict()` is the JSON form `kscience report --json` prints; its keys keep the order and the flat names
(`fast_1.5_eager`, `n_compiled`...) that the report has always had.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kscience.campaigns.usage import CampaignUsage
from kscience.record.rows import CampaignRow

FAST_P = (0.0, 1.0, 1.5, 2.0)
# Baselines a problem's best kernel is compared with, and the ProblemRow field holding each one's time.
BASELINES = {"eager": "eager_us", "compiled": "compiled_us", "faster": "faster_us", "vendor": "vendor_us",
             # the fastest installed library (Liger-Kernel, QuACK...), and the fastest baseline of all
             "library": "library_us", "fastest": "fastest_us"}
# Fields a problem has only once it has a run: a skipped problem's JSON leaves them out.
_RUN_ONLY = ("library_us", "library_label", "fastest_us", "beats_all")


@dataclass(frozen=True)
class ProblemRow:
    """One problem of a campaign: its baselines, seed and best child, what it cost, and the speedups."""

    position: int
    name: str
    locator: str
    status: str
    reason: str | None
    run_id: str | None
    eager_us: float | None = None
    compiled_us: float | None = None
    faster_us: float | None = None
    vendor_us: float | None = None
    seed_us: float | None = None
    best_us: float | None = None
    best_id: str | None = None
    precision: dict = field(default_factory=dict)
    reduced_precision: bool = False
    attempts: int = 0
    cost_usd: float = 0.0
    tokens: int = 0
    build_s: float = 0.0
    device: str | None = None
    interpreted: bool = False
    library_us: float | None = None
    library_label: str | None = None
    fastest_us: float | None = None
    beats_all: bool | None = None  # None: no correct kernel, or no baseline timed
    wall_s: float | None = None
    slot_busy_s: float | None = None
    gpu_hours: float | None = None
    busy: float | None = None
    speedup_eager: float | None = None
    speedup_compiled: float | None = None
    speedup_faster: float | None = None
    speedup_vendor: float | None = None
    speedup_library: float | None = None
    speedup_fastest: float | None = None

    @property
    def skipped(self) -> bool:
        return self.status == "skipped"

    def baseline_us(self, baseline: str) -> float | None:
        """The time of `baseline` (a key of BASELINES) on this problem."""
        return getattr(self, BASELINES[baseline])

    def to_dict(self) -> dict:
        out = asdict(self)
        return out if self.run_id else {k: v for k, v in out.items() if k not in _RUN_ONLY}


@dataclass(frozen=True)
class BaselineSummary:
    """Against one baseline: fast_p for each p of FAST_P, how many problems it is over, the geomean speedup."""

    fast: dict[float, float | None]
    n: int
    geomean_speedup: float | None


@dataclass(frozen=True)
class SuiteSummary:
    """The per-suite columns of KernelBench and STARK."""

    n_problems: int
    n_evaluated: int
    n_skipped: int
    n_correct: int
    success_rate: float | None
    attempts: int
    attempts_per_problem: float | None
    cost_usd: float
    tokens: int
    build_s: float
    n_reduced_precision: int
    against: dict[str, BaselineSummary]  # by the keys of BASELINES

    def to_dict(self) -> dict:
        out = {k: v for k, v in vars(self).items() if k != "against"}
        for baseline, s in self.against.items():
            out.update({f"fast_{p:g}_{baseline}": value for p, value in s.fast.items()})
            out[f"n_{baseline}"] = s.n
            out[f"geomean_speedup_{baseline}"] = s.geomean_speedup
        return out


@dataclass(frozen=True)
class CampaignReport:
    """Everything the report's table, its JSON and its figure show."""

    campaign: CampaignRow
    problems: list[ProblemRow]
    summary: SuiteSummary
    usage: CampaignUsage

    def to_dict(self) -> dict:
        c = self.campaign
        return {"campaign": {"id": c.id, "name": c.name, "suite": c.suite, "status": c.status, "config": c.config,
                             "created": c.created},
                "problems": [r.to_dict() for r in self.problems], "summary": self.summary.to_dict(),
                "usage": asdict(self.usage)}
