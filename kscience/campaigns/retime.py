"""Re-timing: judge a finished run's kernels again on the device at hand, and compare devices.

    retime(store, "r-3f2a91bc", top_k=3)     # or a campaign id: every run of it
    comparison(store, "r-3f2a91bc")          # original verdicts beside the new ones

The kernels are each run's seed, its baselines (PyTorch eager, torch.compile) and its best `top_k`
correct candidates by their original time. They go through the same judge as during the run
(fresh secret inputs, the same checks), and each verdict is stored in `retimes`, keyed by the
device's name, beside the original, which is never changed. A kernel already re-timed on this
device is not judged again, so a killed retime resumes. A kernel that fails on the new device is
stored and shown with its status and message.

The comparison says which kernels carry over (correct on both devices), each kernel's time on
both and the ratio, the rank lists on both, and Kendall's tau between the two rankings of the
kernels correct on both (1: same order, -1: reversed; tau-b, which allows ties).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from kscience.device import detect
from kscience.evaluate.executors.factory import make_executor
from kscience.evaluate.result import EvalRequest
from kscience.problems import ProblemError, bundle, load_problem
from kscience.problems.precision import DEFAULT_POLICY
from kscience.record.store import BASELINE_KINDS, Store, StoreError
from kscience.record.text import US, fmt_us, fmt_x, kind_text
from kscience.record.candidate import Candidate
from kscience.record.rows import RunRow

TOP_K = 3


@dataclass(frozen=True)
class Retimed:
    """What a re-timing did: on which device, how many kernels it judged, how many were re-timed there already,
    and the runs whose problem could not be loaded here (run id -> why)."""

    device: str
    judged: int
    kept: int
    unloadable: dict[str, str]


@dataclass(frozen=True)
class KernelRetime:
    """One kernel's original verdict beside its re-timed one."""

    candidate_id: str
    kind: str
    hypothesis: str
    original_device: str
    original_status: str
    original_us: float | None
    device: str
    status: str
    us: float | None
    message: str  # why it failed on the new device ("" when it passed)
    carries_over: bool  # correct on both devices
    ratio: float | None  # new time over original time


@dataclass(frozen=True)
class RunComparison:
    """A run's re-timed kernels on one device (None: never re-timed), the two rankings and Kendall's tau."""

    run_id: str
    device: str | None
    kernels: list[KernelRetime]
    carried_over: int
    originally_correct: int
    failed_on_new_device: list[str]
    rank_original: list[str]
    rank_new: list[str]
    kendall_tau: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def run_ids(store: Store, target: str) -> list[str]:
    """The runs a run id or a campaign id names."""
    try:
        return [store.run(target).id]
    except StoreError:
        pass
    try:
        store.campaign(target)
    except StoreError:
        raise StoreError(f"no run or campaign {target!r} in {store.path}") from None
    return [r.run_id for r in store.campaign_problems(target) if r.run_id]


def kernels_to_retime(store: Store, run_id: str, top_k: int = TOP_K) -> list[Candidate]:
    """The seed, the baselines and the best `top_k` other correct candidates of a run."""
    cands = [c for c in store.candidates(run_id) if c.result is not None]
    chosen = [c for c in cands if c.kind == "seed" or c.kind in BASELINE_KINDS]
    others = sorted((c for c in cands if c not in chosen and c.ok and c.geomean_us), key=lambda c: c.geomean_us)
    seen, best = {c.source for c in chosen}, []
    for c in others:  # the same text judged twice in a run is one kernel
        if c.source not in seen and len(best) < top_k:
            seen.add(c.source)
            best.append(c)
    return chosen + best


def device_name() -> str:

    return detect().name


def _judge_all(store: Store, jobs: list[tuple[RunRow, Candidate, dict]], device: str, executor, on_result) -> None:
    """Submit every kernel at once (the executor queues them on its slots); store each verdict as it comes."""
    from concurrent.futures import as_completed


    futures = {executor.submit(EvalRequest(problem=run.problem, source=cand.source, shapes="all",
                                           candidate_id=cand.id, **judged_as)): (run, cand)
               for run, cand, judged_as in jobs}
    for future in as_completed(futures):
        run, cand = futures[future]
        result = future.result()
        store.add_retime(run.id, cand.id, device, result)
        if on_result:
            on_result(run, cand, result)


def retime(store: Store, target: str, *, top_k: int = TOP_K, executor_spec: str = "local", gpus: int | None = None,
           executor=None, on_result=None) -> Retimed:
    """Judge the kernels of a run or campaign on this device; `on_result(run, candidate, EvalResult)` hears each
    verdict as it is stored."""

    device = device_name()
    jobs, kept, unloadable = [], 0, {}
    for run_id in run_ids(store, target):
        run = store.run(run_id)
        try:
            problem = load_problem(run.problem, run.overrides)  # a problem missing here is said once, per run
        except ProblemError as exc:
            unloadable[run_id] = str(exc)
            continue
        done = {r.candidate_id for r in store.retimes(run_id, device)}
        files = bundle.pack(problem.locator)  # the problem travels with its requests, to a queue or a cluster
        for cand in kernels_to_retime(store, run_id, top_k):
            if cand.id in done:
                kept += 1
            else:
                # as the run judged it: a baseline's tolerance, settings and leave to call its library, the
                # run's precision policy
                jobs.append((run, cand, {"tolerance": problem.tolerance_for(cand.kind, cand.hypothesis),
                                         "overrides": problem.overrides_for(cand.kind),
                                         "baseline": cand.kind in BASELINE_KINDS, "problem_files": files,
                                         "precision": run.config.get("precision", DEFAULT_POLICY)}))
    if jobs:
        own = executor is None
        if own:

            executor = make_executor(executor_spec, gpus)
        try:
            _judge_all(store, jobs, device, executor, on_result)
        finally:
            if own:
                executor.shutdown()
    return Retimed(device=device, judged=len(jobs), kept=kept, unloadable=unloadable)


# --- comparison ------------------------------------------------------------------------------------
def kendall_tau(xs: list[float], ys: list[float]) -> float | None:
    """Kendall's tau-b of two paired lists (ties allowed); None with fewer than two pairs or no order."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(xs)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else None


def _original_device(cand: Candidate) -> str:
    return cand.device.name or "unknown"


def compare_run(store: Store, run_id: str, device: str | None = None) -> RunComparison:
    """The run's re-timed kernels beside their original verdicts, for one re-timing device
    (default: the one re-timed last)."""
    retimes = store.retimes(run_id)
    if device is None:
        device = retimes[-1].device if retimes else None
    latest = {r.candidate_id: r for r in retimes if r.device == device}  # the newest per kernel
    rows = []
    for cand in store.candidates(run_id):
        new = latest.get(cand.id)
        if new is None:
            continue
        old_ok, new_ok = cand.ok, new.status == "ok"
        rows.append(KernelRetime(candidate_id=cand.id, kind=cand.kind, hypothesis=cand.hypothesis,
                                 original_device=_original_device(cand), original_status=cand.status,
                                 original_us=cand.geomean_us, device=device, status=new.status, us=new.geomean_us,
                                 message=new.message if not new_ok else "", carries_over=old_ok and new_ok,
                                 ratio=new.geomean_us / cand.geomean_us if old_ok and new_ok and cand.geomean_us
                                 and new.geomean_us else None))
    both = [r for r in rows if r.carries_over and r.original_us and r.us]
    originally_ok = [r for r in rows if r.original_status == "ok"]
    return RunComparison(run_id=run_id, device=device, kernels=rows, carried_over=len(both),
                         originally_correct=len(originally_ok),
                         failed_on_new_device=[r.candidate_id for r in originally_ok if not r.carries_over],
                         rank_original=[r.candidate_id for r in sorted(both, key=lambda r: r.original_us)],
                         rank_new=[r.candidate_id for r in sorted(both, key=lambda r: r.us)],
                         kendall_tau=kendall_tau([r.original_us for r in both], [r.us for r in both]))


def comparison(store: Store, target: str, device: str | None = None) -> list[RunComparison]:
    return [compare_run(store, run_id, device) for run_id in run_ids(store, target)]


def comparison_lines(store: Store, comparisons: list[RunComparison]) -> list[str]:
    lines = []
    for comp in comparisons:
        run = store.run(comp.run_id)
        if comp.device is None:
            lines.append(f"run {comp.run_id} ({run.problem}): not re-timed")
            continue
        origin = comp.kernels[0].original_device if comp.kernels else "?"
        tau = "-" if comp.kendall_tau is None else f"{comp.kendall_tau:+.2f}"
        lines.append(f"run {comp.run_id} ({run.problem}): {origin} -> {comp.device}; "
                     f"{comp.carried_over} of {comp.originally_correct} correct kernels carry over; "
                     f"Kendall tau {tau}")
        lines.append(f"  {'kernel':<12} {'kind':<14} {'original':>22} {'re-timed':>22} {'time ratio':>10}")
        for r in comp.kernels:
            old = fmt_us(r.original_us, US) if r.original_status == "ok" else r.original_status
            new = fmt_us(r.us, US) if r.status == "ok" else r.status
            lines.append(f"  {r.candidate_id:<12} {kind_text(r.kind):<14} {old:>22} {new:>22} "
                         f"{fmt_x(r.ratio):>10}")
            if r.message:
                lines.append(f"      {r.message}")
        if comp.rank_original:
            lines.append(f"  rank before: {' < '.join(comp.rank_original)}")
            lines.append(f"  rank after:  {' < '.join(comp.rank_new)}")
    return lines
