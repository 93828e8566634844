"""The one reading of a stored run: best, speedups, iterations done, predictions (numbers as text: text.py).

The CLI (`runs`, `show`, the end-of-run table), the dashboard, the text summary, the run object,
the report figures and the notebooks all read a run through a `Snapshot`, never from event
payloads or their own arithmetic, so a run watched live, reopened later, or followed from another
process says the same everywhere: the database is the only source of truth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

from kscience.problems import geomean, shape_label
from kscience.evaluate.result import OK, DeviceRecord
from kscience.problems.roofline import ShapeSol, SolSummary, summary
from kscience.record.candidate import BENCHMARK, Candidate, predicted_range
from kscience.record.metrics import KernelSplit, RunMetrics, faster_of, run_metrics_of, us_of
from kscience.record.rows import FindingRow, LlmUsage, PlanRow, ProfileRow, RunRow, SlotTime
from kscience.record.store import BASELINE_KINDS, PENDING, WRITE_FAILED, Store


# --- numbers ----------------------------------------------------------------------------------
def inside_range(low: float | None, high: float | None, measured: float | None) -> bool | None:
    """Whether a measured uplift fell inside the predicted range; None when either is missing."""
    span = predicted_range(low, high)
    return None if span is None or measured is None else span[0] <= measured <= span[1]


def iterations_done(plans: list[PlanRow]) -> int:
    """Iterations (designs) whose plans are stored: what a run counts toward its target. Counted, not
    the highest number: with several lines, a line that found nothing to try leaves its number unused."""
    return len({p.iteration for p in plans})


def judged_count(candidates: list[Candidate]) -> int:
    """Candidate kernels with a verdict (seed, children, repairs; not the baselines, not failed writes):
    what the `--evaluations` budget counts. A source judged before gets its verdict again and counts."""
    return sum(c.kind not in BASELINE_KINDS and c.status not in (PENDING, WRITE_FAILED) for c in candidates)


def best_candidate(candidates: list[Candidate]) -> Candidate | None:
    """The fastest correct population member (the seed counts; the baselines do not). A member judged slower
    than another on one host (kscience.run.confirm) is not the best, whatever its figure from another host."""
    ok = [c for c in candidates if c.kind not in BASELINE_KINDS and c.ok and c.geomean_us
          and not c.notes.get("slower_than")]
    return min(ok, key=lambda c: c.geomean_us) if ok else None


def _largest(facts: list[dict], fact: str) -> int | None:
    """The largest of one compile fact (registers, spills) over a candidate's kernels; None where none has it."""
    return max((v for v in (f.get(fact) for f in facts) if v is not None), default=None)


def first_of_kind(candidates: list[Candidate], kind: str) -> Candidate | None:
    return next((c for c in candidates if c.kind == kind), None)


@dataclass(frozen=True)
class Baselines:
    """Horizontal lines a kernel's time is judged against, in microseconds (None: not available)."""

    eager_us: float | None  # PyTorch eager (the problem's eager kernel, else its reference), timed by the run
    compile_us: float | None  # torch.compile of PyTorch eager, timed by runs on a GPU
    compile_status: str | None  # the torch.compile candidate's status; None: the run stored none
    floor_us: float | None  # geomean over benchmark shapes of bytes/bandwidth or FLOPs/rate
    interpreted: bool  # CPU interpreter timings: no physical floor exists

    def missing(self) -> list[str]:
        """Why each absent line is absent, for a legend or a caption."""
        notes = []
        if self.eager_us is None:
            notes.append("PyTorch eager: not timed yet")
        if self.compile_us is None:
            if self.compile_status is None:
                why = "not timed (CPU run)" if self.interpreted else "not timed by this run"
            else:
                why = "not timed yet" if self.compile_status == PENDING else self.compile_status.replace("_", " ")
            notes.append(f"torch.compile: {why}")
        if self.floor_us is None:
            notes.append("physical floor: " + ("GPU only" if self.interpreted else "unknown for this device"))
        return notes


def error_text(candidate: Candidate) -> str:
    """What went wrong with a failed candidate: the verdict, the failing shape and the output tail."""
    result = candidate.result
    lines = [f"{candidate.status}: {candidate.message}"]
    if result and result.failing_shape:
        lines.append(f"failing shape: {shape_label(result.failing_shape)}")
    tail = ((result.stdout_tail or "") + (result.stderr_tail or "")).strip() if result else ""
    if tail:
        lines += ["", tail[-2000:]]
    return "\n".join(lines)


@dataclass(frozen=True)
class Prediction:
    """A finished experiment whose plan predicted an uplift: the range (low, high, in percent), the uplift its
    kernel measured (None where it did not pass) and whether that fell inside."""

    plan_id: str
    candidate_id: str | None
    iteration: int
    title: str
    low: float
    high: float
    measured: float | None
    inside: bool | None


@dataclass(frozen=True)
class ProfilePoint:
    """What a paper plots of one evaluated member: speed against occupancy, spills against failures (None where
    a profiler did not see it)."""

    id: str
    status: str
    geomean_us: float | None
    registers: int | None
    spills: int | None
    occupancy_pct: float | None
    dram_pct: float | None
    sol_worst: float | None
    flag: str | None
    profile_s: float | None


@dataclass(frozen=True)
class RunListing:
    """A run's row with the few numbers `kscience runs` lists; `to_dict()` is the row with them beside it."""

    run: RunRow
    iterations_done: int
    n_candidates: int
    seed_us: float | None
    best_us: float | None
    eager_us: float | None
    interpreted: bool
    device_name: str | None

    def to_dict(self) -> dict:
        return {**self.run.to_dict(), **{k: v for k, v in vars(self).items() if k != "run"}}


@dataclass
class Snapshot:
    run: RunRow
    candidates: list[Candidate]  # in creation order
    plans: list[PlanRow]
    findings: list[FindingRow]
    usage: LlmUsage
    taken_at: float
    profiles: list[ProfileRow] = field(default_factory=list)  # what a profiler saw, per candidate
    slot_times: list[SlotTime] = field(default_factory=list)  # busy time per evaluation slot and session

    @classmethod
    def load(cls, store: Store, run_id: str) -> "Snapshot":
        return cls(run=store.run(run_id), candidates=store.candidates(run_id), plans=store.plans(run_id),
                   findings=store.findings(run_id), usage=store.llm_usage(run_id), taken_at=time.time(),
                   profiles=store.profiles(run_id), slot_times=store.slot_times(run_id))

    # --- the population ----------------------------------------------------------------------
    @cached_property
    def by_id(self) -> dict[str, Candidate]:
        return {c.id: c for c in self.candidates}

    @property
    def seed(self) -> Candidate | None:
        return first_of_kind(self.candidates, "seed")

    @property
    def eager(self) -> Candidate | None:
        return first_of_kind(self.candidates, "eager")

    @property
    def compiled(self) -> Candidate | None:
        return first_of_kind(self.candidates, "compiled")

    @property
    def vendor(self) -> Candidate | None:
        """The problem's vendor-library path (cuBLAS...), where it declares one."""
        return first_of_kind(self.candidates, "vendor")

    @property
    def libraries(self) -> list[Candidate]:
        """The libraries a user would install instead (Liger-Kernel, QuACK...), where the problem names them."""
        return [c for c in self.candidates if c.kind == "library"]

    @cached_property
    def settled(self) -> list[Candidate]:
        """Population members with a verdict (evaluated, or never written), in the order they got it."""
        done = [c for c in self.candidates if c.kind not in BASELINE_KINDS and c.status != PENDING]
        return sorted(done, key=lambda c: (c.evaluated or c.created, c.seq))

    @cached_property
    def correct(self) -> list[Candidate]:
        return [c for c in self.settled if c.status == "ok" and c.geomean_us]

    @property
    def best(self) -> Candidate | None:
        return best_candidate(self.correct)

    @cached_property
    def evaluated(self) -> list[Candidate]:
        """Population members the evaluator judged (not those never written), in the order judged."""
        return [c for c in self.settled if c.evaluated is not None]

    def ranked(self) -> list[Candidate]:
        """Correct candidates fastest first, then the failed ones newest first."""
        failed = [c for c in self.settled if c not in self.correct]
        return sorted(self.correct, key=lambda c: c.geomean_us) + failed[::-1]

    def best_so_far(self) -> list[tuple[int, float]]:
        """(position in `settled`, best time up to and including it) at each improvement."""
        steps, best = [], None
        for i, c in enumerate(self.settled):
            if c in self.correct and (best is None or c.geomean_us < best):
                best = c.geomean_us
                steps.append((i, best))
        return steps

    def faster_us(self) -> float | None:
        """The faster of PyTorch eager and torch.compile: the baseline that counts (None: not known yet)."""
        return faster_of(self.eager, self.compiled)

    def speedups(self, candidate: Candidate) -> tuple[float | None, float | None]:
        """(vs seed, vs PyTorch eager) of a correct candidate; None where either time is missing."""
        return candidate.speedup_over(self.seed), candidate.speedup_over(self.eager)

    def children(self) -> dict[str | None, list[Candidate]]:
        """Lineage: parent id -> its children, in creation order (roots under None)."""
        tree: dict[str | None, list[Candidate]] = {}
        for c in self.candidates:
            if c.kind in BASELINE_KINDS:
                continue
            parent = c.parent_id if c.parent_id in self.by_id else None
            tree.setdefault(parent, []).append(c)
        return tree

    # --- what a profiler saw ------------------------------------------------------------------
    @cached_property
    def profile_of(self) -> dict[str, ProfileRow]:
        """candidate id -> its stored profile (compile facts, ncu counters, speed of light, flag)."""
        return {p.candidate_id: p for p in self.profiles}

    def kernel_split(self, candidate: Candidate | None) -> list[KernelSplit]:
        """Time per launched kernel and call on each timed shape of a candidate; [] where none was measured."""
        shapes = candidate.result.shapes if candidate and candidate.result else []
        return [KernelSplit(shape=shape_label(s.shape), kernels=s.kernel_times) for s in shapes
                if s.phase == BENCHMARK and s.kernels]

    @cached_property
    def slot_s(self) -> float:
        """Seconds of evaluation-slot time the run has had, every slot and session together."""
        return sum(row.wall_s for row in self.slot_times)

    def sol(self, candidate: Candidate | None) -> list[ShapeSol]:
        """Speed of light per timed shape of a candidate, as its profile stored it; [] without a bound."""
        profile = self.profile_of.get(candidate.id) if candidate else None
        return [ShapeSol.from_dict(s) for s in profile.sol or []] if profile else []

    def sol_summary(self, candidate: Candidate | None) -> SolSummary | None:
        """Worst and median fraction of speed of light over shapes, and the worst shape and its bound."""
        return summary(self.sol(candidate))

    def profile_points(self) -> list[ProfilePoint]:
        """Per evaluated population member, the numbers a paper plots: speed against occupancy, spills
        against failures. None where a profiler did not see it."""
        out = []
        for c in self.evaluated:
            p = self.profile_of.get(c.id)
            facts = (p.compile_facts if p else None) or []  # kscience.evaluate.profile.compile_facts dicts
            counters, sol = (p.ncu if p else None) or {}, self.sol_summary(c)
            out.append(ProfilePoint(
                id=c.id, status=c.status, geomean_us=c.geomean_us,
                registers=_largest(facts, "registers"), spills=_largest(facts, "spills"),
                occupancy_pct=counters.get("occupancy_pct"), dram_pct=counters.get("dram_pct"),
                sol_worst=sol.worst if sol else None, flag=p.flag if p else None,
                profile_s=p.profile_s if p else None))
        return out

    # --- the run -----------------------------------------------------------------------------
    @property
    def iterations_done(self) -> int:
        return iterations_done(self.plans)

    @property
    def iterations_complete(self) -> int:
        """Design rounds whose chosen experiments have all ended in a finding."""
        found = {f.plan_id for f in self.findings}
        complete: dict[int, bool] = {}
        for p in self.plans:
            complete[p.iteration] = complete.get(p.iteration, True) and (not p.chosen or p.id in found)
        return sum(complete.values())

    @property
    def target(self) -> int:
        return int(self.run.config.get("iterations") or 0)

    @property
    def device(self) -> DeviceRecord:
        """The device the timings came from (the newest evaluation), else the one the run started on."""
        for c in reversed(self.settled):
            if c.result and c.result.device:
                return c.device
        return DeviceRecord.from_dict(self.run.environment.get("device"))

    @property
    def timing_label(self) -> str:
        judged = next((c.result for c in reversed(self.settled) if c.result), None)
        return judged.timing_label if judged else ""

    def baselines(self) -> Baselines:
        ref, compiled = self.eager, self.compiled
        floors = []
        judged = self.seed if self.seed and self.seed.result else self.best
        for s in judged.result.shapes if judged and judged.result else []:
            if s.phase == BENCHMARK:
                floors.append(s.floor_us)
        interpreted = bool(self.device.interpreted)
        # Under the interpreter there is no hardware to bound: a floor would be meaningless.
        floor = geomean(floors) if floors and all(floors) and not interpreted else None
        return Baselines(eager_us=ref.geomean_us if ref and ref.status == OK else None,
                         compile_us=compiled.geomean_us if compiled and compiled.status == OK else None,
                         compile_status=compiled.status if compiled else None,
                         floor_us=floor, interpreted=interpreted)

    def plan_outcomes(self) -> dict[str, FindingRow]:
        """plan id -> its finding (the measured outcome), for plans that have one."""
        return {f.plan_id: f for f in self.findings}

    def predictions(self) -> list[Prediction]:
        """Every finished experiment whose plan predicted an uplift, with what its kernel measured."""
        titles = {p.id: p.title for p in self.plans}
        out = []
        for f in self.findings:
            span = predicted_range(f.predicted_min_pct, f.predicted_max_pct)
            if span is None:
                continue
            out.append(Prediction(plan_id=f.plan_id, candidate_id=f.candidate_id, iteration=f.iteration,
                                  title=titles.get(f.plan_id, f.plan_id), low=span[0], high=span[1],
                                  measured=f.measured_pct, inside=inside_range(*span, f.measured_pct)))
        return out

    def elapsed_s(self) -> float:
        """Wall time of the run so far (to its last update once it has ended)."""
        end = self.taken_at if self.run.status == "running" else self.run.updated
        return max(0.0, end - self.run.created)

    # --- the numbers a paper reports ---------------------------------------------------------
    @cached_property
    def busy_fractions(self) -> list[float]:
        """Per evaluation slot, the fraction of the run's wall time (every session it had that slot) in
        which an evaluation was in flight on it. Empty for runs stored before schema 4."""
        busy: dict[int, list[float]] = {}
        for row in self.slot_times:
            total = busy.setdefault(row.slot, [0.0, 0.0])
            total[0] += row.busy_s
            total[1] += row.wall_s
        return [round(min(1.0, b / w), 4) if w > 0 else 0.0 for _, (b, w) in sorted(busy.items())]

    def session_of(self, candidate: Candidate | None) -> float | None:
        """When the session (of the run's sessions: its start and each resume) that judged `candidate` began;
        None where that is not known (a run stored before slot times were, a candidate never judged)."""
        starts = sorted({row.session for row in self.slot_times})
        if candidate is None or candidate.evaluated is None or not starts:
            return None
        return max((t for t in starts if t <= candidate.evaluated), default=starts[0])

    def metrics(self) -> RunMetrics:
        """The run's numbers, as `kscience show --json` reports them: recomputed from the stored rows."""
        return run_metrics_of(self)

    def listing(self) -> RunListing:
        """The run's row with the few numbers `kscience runs` lists."""
        return RunListing(run=self.run, iterations_done=self.iterations_done, n_candidates=len(self.evaluated),
                          seed_us=us_of(self.seed), best_us=us_of(self.best), eager_us=us_of(self.eager),
                          interpreted=bool(self.device.interpreted), device_name=self.device.name)


def run_metrics(store: Store, run_id: str) -> RunMetrics:
    """`Snapshot.metrics` of a stored run."""
    return Snapshot.load(store, run_id).metrics()


def run_listing(store: Store) -> list[RunListing]:
    """Every stored run, newest first, with its iterations, candidates and seed, best and PyTorch eager times."""
    return [Snapshot.load(store, row.id).listing() for row in store.list_runs()]
