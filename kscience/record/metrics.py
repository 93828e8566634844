"""A run's numbers, as `kscience show --json` reports them and the end-of-run table prints them: `RunMetrics`,
recomputed from a `Snapshot` (the stored rows), never kept apart from them.

Each field is one number or one small record; `to_dict()` is the JSON form, its keys in the order of the
fields, which is the order `show --json` has always printed them in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from kscience.evaluate.result import OK, DeviceRecord, KernelTime
from kscience.problems import shape_label
from kscience.record.candidate import REPAIRABLE, Candidate, faster_of_eager_and_compile, speedup
from kscience.record.rows import LlmUsage
from kscience.record.store import PENDING



@dataclass(frozen=True)
class LibraryFigure:
    """An installed library timed as a baseline (Liger-Kernel, QuACK...): what it is and how it did."""

    label: str
    us: float | None
    status: str
    message: str | None  # why it has no time (not installed...); None when it passed


@dataclass(frozen=True)
class FigureHosts:
    """Which machine judged each figure of the table (kscience.run.confirm): figures compare only on one."""

    eager: str | None
    compiled: str | None
    vendor: str | None
    seed: str | None
    best: str | None

    def of(self, figure: str) -> str | None:
        """The host of `figure` (a field's name); None for any other row of the table."""
        return getattr(self, figure) if figure in {f.name for f in fields(self)} else None


@dataclass(frozen=True)
class Uplift:
    """One measured experiment: its plan's predicted uplift range and what its kernel measured, in percent."""

    plan_id: str
    candidate_id: str | None
    iteration: int
    predicted_min_pct: float
    predicted_max_pct: float
    measured_pct: float


@dataclass(frozen=True)
class SolShare:
    """The best kernel's speed of light on one timed shape: the fraction of the roofline bound it reached."""

    shape: str
    fraction: float
    bound: str


@dataclass(frozen=True)
class KernelSplit:
    """Time per launched kernel and call on one timed shape, as the judge measured it."""

    shape: str
    kernels: list[KernelTime]


@dataclass(frozen=True)
class RunMetrics:
    """The run's numbers (module docstring); None where a figure does not exist yet or for this run."""

    n_candidates: int
    n_ok: int
    n_failed: int
    best_id: str | None
    best_us: float | None
    seed_us: float | None
    eager_us: float | None
    compiled_us: float | None
    compiled_status: str | None
    compiled_message: str | None
    speedup_vs_seed: float | None
    speedup_vs_eager: float | None
    speedup_vs_compiled: float | None
    # the baseline that counts, and whether the best computes far less precisely than the reference
    faster_us: float | None
    speedup_vs_faster: float | None
    precision_best: dict
    n_reduced_precision: int
    vendor_us: float | None
    vendor_status: str | None
    vendor_label: str | None
    vendor_message: str | None
    speedup_vs_vendor: float | None
    # the vendor call alone (its inputs laid out beforehand), shown beside the vendor row; never a rival
    vendor_alone_us: float | None
    vendor_alone_status: str | None
    vendor_alone_label: str | None
    vendor_alone_message: str | None
    libraries: list[LibraryFigure]
    fastest_baseline: str | None
    fastest_baseline_us: float | None
    speedup_vs_fastest_baseline: float | None
    n_composites: int
    hosts: list[str]
    figure_hosts: FigureHosts
    best_kind: str | None
    evaluated_to_best: int | None
    iterations_done: int
    repairs_tried: int
    repairs_succeeded: int
    repair_attempts: int
    repair_success_rate: float | None
    edits_total: int
    edits_applied: int
    edit_apply_rate: float | None
    uplift: list[Uplift]
    uplift_in_range: int
    uplift_mean_abs_error_pct: float | None
    llm: LlmUsage
    sol_worst: float | None
    sol_median: float | None
    sol_best: list[SolShare]
    n_profiled: int
    profile_s_total: float | None
    profile_share: float | None
    n_flagged: int
    kernels_best: list[KernelSplit]
    output_best: str | None
    timing_label: str | None
    device: dict | None
    busy_per_slot: list[float]
    # Seed and best timed by different sessions (a resume): their ratio mixes two moments' machine load.
    seed_best_sessions_differ: bool

    @property
    def judged_on(self) -> DeviceRecord:
        """`device`, typed (an empty record where the run has no settled verdict)."""
        return DeviceRecord.from_dict(self.device)

    def to_dict(self) -> dict:
        return asdict(self)


def us_of(candidate: Candidate | None) -> float | None:
    return candidate.geomean_us if candidate else None


def host_of(candidate: Candidate | None) -> str | None:
    """The host that judged a candidate's stored verdict (device.host), where it was recorded."""
    return candidate.host if candidate else None


def faster_of(eager: Candidate | None, compiled: Candidate | None) -> float | None:
    """The faster of PyTorch eager and torch.compile (record.candidate.faster_of_eager_and_compile)."""
    return faster_of_eager_and_compile(us_of(eager), us_of(compiled),
                                       compiled is not None and compiled.status != PENDING)


def fastest_baseline(eager: Candidate | None, compiled: Candidate | None, vendor: Candidate | None,
                     libraries: list[Candidate]) -> tuple[str | None, float | None]:
    """The fastest baseline that passed (eager, torch.compile, the vendor library, an installed library), and its
    time: the number a user choosing what to run compares."""
    timed = [(name, us_of(c)) for name, c in (("PyTorch eager", eager), ("torch.compile", compiled),
                                              ("vendor library", vendor)) if us_of(c)]
    timed += [(c.hypothesis, us_of(c)) for c in libraries if us_of(c)]
    return min(timed, key=lambda t: t[1]) if timed else (None, None)


def _failed_message(candidate: Candidate | None) -> str | None:
    return candidate.message or None if candidate and candidate.status != OK else None


def run_metrics_of(snap) -> RunMetrics:
    """The metrics of a `kscience.record.snapshot.Snapshot` (which calls this from `Snapshot.metrics`)."""
    evaluated, best, seed = snap.evaluated, snap.best, snap.seed
    ref, compiled, vendor = snap.eager, snap.compiled, snap.vendor
    alone = next((c for c in snap.candidates if c.kind == "vendor_alone"), None)
    seed_us, best_us = us_of(seed), us_of(best)
    # A chain is one plan's candidates (or the seed's): repair succeeds when a repair in it passes.
    chains: dict[str, list[Candidate]] = {}
    for c in snap.candidates:
        if c.kind in ("seed", "child", "repair"):
            chains.setdefault(c.plan_id or "seed", []).append(c)
    repaired = [ch for ch in chains.values() if any(c.kind == "repair" for c in ch)]
    fixed = [ch for ch in repaired if any(c.kind == "repair" and c.status == OK for c in ch)]
    drafts = [c for c in snap.candidates if c.kind in ("child", "repair") and c.edits_total]
    edits_total = sum(c.edits_total for c in drafts)
    edits_applied = sum(c.edits_applied for c in drafts)
    measured = [p for p in snap.predictions() if p.measured is not None]
    errors = [abs((p.low + p.high) / 2 - p.measured) for p in measured]
    fastest_name, fastest_us = fastest_baseline(ref, compiled, vendor, snap.libraries)
    sol = snap.sol_summary(best)
    profiled = [p for p in snap.profiles if p.ncu]
    profile_s = sum(p.profile_s or 0.0 for p in snap.profiles)
    return RunMetrics(
        n_candidates=len(evaluated), n_ok=sum(c.status == OK for c in evaluated),
        n_failed=sum(c.status in REPAIRABLE for c in evaluated),
        best_id=best.id if best else None, best_us=best_us, seed_us=seed_us,
        eager_us=us_of(ref), compiled_us=us_of(compiled),
        compiled_status=compiled.status if compiled else None,
        compiled_message=compiled.message if compiled and compiled.status != OK else None,
        speedup_vs_seed=speedup(seed_us, best_us), speedup_vs_eager=speedup(us_of(ref), best_us),
        speedup_vs_compiled=speedup(us_of(compiled), best_us),
        faster_us=snap.faster_us(), speedup_vs_faster=speedup(snap.faster_us(), best_us),
        precision_best=best.precision if best else {},
        n_reduced_precision=sum(c.reduced_precision for c in evaluated),
        vendor_us=us_of(vendor), vendor_status=vendor.status if vendor else None,
        vendor_label=vendor.hypothesis if vendor else None, vendor_message=_failed_message(vendor),
        speedup_vs_vendor=speedup(us_of(vendor), best_us),
        vendor_alone_us=us_of(alone), vendor_alone_status=alone.status if alone else None,
        vendor_alone_label=alone.hypothesis if alone else None, vendor_alone_message=_failed_message(alone),
        libraries=[LibraryFigure(label=c.hypothesis, us=us_of(c), status=c.status,
                                 message=c.message if c.status != OK else None) for c in snap.libraries],
        fastest_baseline=fastest_name, fastest_baseline_us=fastest_us,
        speedup_vs_fastest_baseline=speedup(fastest_us, best_us),
        n_composites=sum(c.kind == "composite" and c.status != PENDING for c in snap.candidates),
        hosts=sorted({h for h in map(host_of, snap.candidates) if h}),
        figure_hosts=FigureHosts(eager=host_of(ref), compiled=host_of(compiled), vendor=host_of(vendor),
                                 seed=host_of(seed), best=host_of(best)),
        best_kind=best.kind if best else None,
        evaluated_to_best=evaluated.index(best) + 1 if best in evaluated else None,
        iterations_done=snap.iterations_done,
        repairs_tried=len(repaired), repairs_succeeded=len(fixed),
        repair_attempts=sum(c.kind == "repair" for c in snap.candidates),
        repair_success_rate=len(fixed) / len(repaired) if repaired else None,
        edits_total=edits_total, edits_applied=edits_applied,
        edit_apply_rate=edits_applied / edits_total if edits_total else None,
        uplift=[Uplift(plan_id=p.plan_id, candidate_id=p.candidate_id, iteration=p.iteration,
                       predicted_min_pct=p.low, predicted_max_pct=p.high, measured_pct=p.measured) for p in measured],
        uplift_in_range=sum(bool(p.inside) for p in measured),
        uplift_mean_abs_error_pct=sum(errors) / len(errors) if errors else None,
        llm=snap.usage, sol_worst=sol.worst if sol else None,
        sol_median=sol.median if sol else None,
        sol_best=[SolShare(shape=shape_label(s.shape), fraction=s.fraction, bound=s.bound) for s in snap.sol(best)],
        n_profiled=sum(p.ncu is not None for p in snap.profiles),
        profile_s_total=profile_s if profiled else None,
        profile_share=profile_s / snap.slot_s if snap.slot_s and profiled else None,
        n_flagged=sum(bool(p.flag) for p in snap.profiles),
        kernels_best=snap.kernel_split(best),
        output_best=best.result.output or None if best and best.result else None,
        timing_label=snap.timing_label or None, device=snap.device.stored if snap.settled else None,
        busy_per_slot=snap.busy_fractions,
        seed_best_sessions_differ=(snap.session_of(seed) != snap.session_of(best)
                                   if best and seed and snap.session_of(best) is not None else False))
