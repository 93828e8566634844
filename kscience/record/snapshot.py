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
from kscience.evaluate import result as R
from kscience.problems.roofline import ShapeSol, summary
from kscience.record.store import BASELINE_KINDS, PENDING, WRITE_FAILED, Store
from kscience.record.candidate import (BENCHMARK, Candidate, faster_of_eager_and_compile, predicted_range,
                                         speedup)

OK = R.OK
# Failures of a candidate's own making: the loop repairs them, the metrics count them as failed.
REPAIRABLE = (R.COMPILE_ERROR, R.RUNTIME_ERROR, R.WRONG_ANSWER, R.CRASHED, R.TIMEOUT)


# --- numbers ----------------------------------------------------------------------------------
def inside_range(low: float | None, high: float | None, measured: float | None) -> bool | None:
    """Whether a measured uplift fell inside the predicted range; None when either is missing."""
    span = predicted_range(low, high)
    return None if span is None or measured is None else span[0] <= measured <= span[1]


def iterations_done(plans: list[dict]) -> int:
    """Iterations (designs) whose plans are stored: what a run counts toward its target. Counted, not
    the highest number: with several lines, a line that found nothing to try leaves its number unused."""
    return len({p["iteration"] for p in plans})


def judged_count(candidates: list[Candidate]) -> int:
    """Candidate kernels with a verdict (seed, children, repairs; not the baselines, not failed writes):
    what the `--evaluations` budget counts. A source judged before gets its verdict again and counts."""
    return sum(c.kind not in BASELINE_KINDS and c.status not in (PENDING, WRITE_FAILED) for c in candidates)


def _host(cand: Candidate | None) -> str | None:
    """The host that judged a candidate's stored verdict (device.host), where it was recorded."""
    return cand.host if cand else None


def best_candidate(candidates: list[Candidate]) -> Candidate | None:
    """The fastest correct population member (the seed counts; the baselines do not). A member judged slower
    than another on one host (kscience.run.confirm) is not the best, whatever its figure from another host."""
    ok = [c for c in candidates if c.kind not in BASELINE_KINDS and c.ok and c.geomean_us
          and not c.notes.get("slower_than")]
    return min(ok, key=lambda c: c.geomean_us) if ok else None


def fastest_baseline(eager: Candidate | None, compiled: Candidate | None, vendor: Candidate | None,
                     libraries: list[Candidate],
                     best_us: float | None) -> dict:
    """The fastest baseline that passed (eager, torch.compile, the vendor library, an installed library), and the
    best kernel's speedup over it: the number a user choosing what to run compares."""
    timed = [(name, _us(c)) for name, c in (("PyTorch eager", eager), ("torch.compile", compiled),
                                            ("vendor library", vendor)) if _us(c)]
    timed += [(c.hypothesis, _us(c)) for c in libraries if _us(c)]
    name, us = min(timed, key=lambda t: t[1]) if timed else (None, None)
    return {"fastest_baseline": name, "fastest_baseline_us": us, "speedup_vs_fastest_baseline": speedup(us, best_us)}


def _alone(cand: Candidate | None) -> dict:
    """The vendor call alone (its inputs laid out beforehand), shown beside the vendor row; never a rival."""
    return {"vendor_alone_us": _us(cand), "vendor_alone_status": cand and cand.status,
            "vendor_alone_label": cand and cand.hypothesis,
            "vendor_alone_message": cand and cand.status != OK and cand.message or None}


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


@dataclass
class Snapshot:
    run: dict
    candidates: list[Candidate]  # in creation order
    plans: list[dict]
    findings: list[dict]
    usage: dict  # store.llm_usage
    taken_at: float
    profiles: list[dict] = field(default_factory=list)  # what a profiler saw, per candidate (store.profiles)
    slot_times: list[dict] = field(default_factory=list)  # busy time per evaluation slot and session

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
        return _faster(self.eager, self.compiled)

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
    def profile_of(self) -> dict[str, dict]:
        """candidate id -> its stored profile (compile facts, ncu counters, speed of light, flag)."""
        return {p["candidate_id"]: p for p in self.profiles}

    def kernel_split(self, candidate: Candidate | None) -> list[dict]:
        """Time per launched kernel and call on each timed shape of a candidate: {"shape": label,
        "kernels": [{"name", "launches", "us"}]}; [] where none was measured."""
        shapes = candidate.result.shapes if candidate and candidate.result else []
        return [{"shape": shape_label(s.shape), "kernels": s.kernels} for s in shapes
                if s.phase == BENCHMARK and s.kernels]

    @cached_property
    def slot_s(self) -> float:
        """Seconds of evaluation-slot time the run has had, every slot and session together."""
        return sum(row["wall_s"] for row in self.slot_times)

    def sol(self, candidate: Candidate | None) -> list[dict]:
        """Speed of light per timed shape of a candidate (stored dicts with `fraction`); [] without a bound."""
        return list((self.profile_of.get(candidate.id) or {}).get("sol") or []) if candidate else []

    def sol_summary(self, candidate: Candidate | None) -> dict | None:
        """Worst and median fraction of speed of light over shapes, and the worst shape and its bound."""
        return summary([ShapeSol.from_dict(s) for s in self.sol(candidate)])

    def profile_points(self) -> list[dict]:
        """Per evaluated population member, the numbers a paper plots: speed against occupancy, spills
        against failures. None where a profiler did not see it."""
        out = []
        for c in self.evaluated:
            p = self.profile_of.get(c.id) or {}
            facts, counters, sol = p.get("compile_facts") or [], p.get("ncu") or {}, self.sol_summary(c)
            out.append({"id": c.id, "status": c.status, "geomean_us": c.geomean_us,
                        "registers": max((f["registers"] for f in facts if f.get("registers") is not None),
                                         default=None),
                        "spills": max((f["spills"] for f in facts if f.get("spills") is not None), default=None),
                        "occupancy_pct": counters.get("occupancy_pct"), "dram_pct": counters.get("dram_pct"),
                        "sol_worst": sol["worst"] if sol else None, "flag": p.get("flag"),
                        "profile_s": p.get("profile_s")})
        return out

    # --- the run -----------------------------------------------------------------------------
    @property
    def iterations_done(self) -> int:
        return iterations_done(self.plans)

    @property
    def iterations_complete(self) -> int:
        """Design rounds whose chosen experiments have all ended in a finding."""
        found = {f["plan_id"] for f in self.findings}
        complete: dict[int, bool] = {}
        for p in self.plans:
            complete[p["iteration"]] = complete.get(p["iteration"], True) and (not p["chosen"] or p["id"] in found)
        return sum(complete.values())

    @property
    def target(self) -> int:
        return int(self.run["config"].get("iterations") or 0)

    @property
    def device(self) -> dict:
        """The device the timings came from (the newest evaluation), else the one the run started on."""
        for c in reversed(self.settled):
            if c.device:
                return c.device
        return self.run["environment"].get("device") or {}

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
        interpreted = bool(self.device.get("interpreted"))
        # Under the interpreter there is no hardware to bound: a floor would be meaningless.
        floor = geomean(floors) if floors and all(floors) and not interpreted else None
        return Baselines(eager_us=ref.geomean_us if ref and ref.status == OK else None,
                         compile_us=compiled.geomean_us if compiled and compiled.status == OK else None,
                         compile_status=compiled.status if compiled else None,
                         floor_us=floor, interpreted=interpreted)

    def plan_outcomes(self) -> dict[str, dict]:
        """plan id -> its finding (the measured outcome), for plans that have one."""
        return {f["plan_id"]: f for f in self.findings}

    def predictions(self) -> list[dict]:
        """Every finished experiment whose plan predicted an uplift: the predicted range (low, high in
        percent), the measured uplift (None when its kernel did not pass) and whether it fell inside."""
        titles = {p["id"]: p["title"] for p in self.plans}
        out = []
        for f in self.findings:
            span = predicted_range(f["predicted_min_pct"], f["predicted_max_pct"])
            if span is None:
                continue
            out.append({"plan_id": f["plan_id"], "candidate_id": f["candidate_id"], "iteration": f["iteration"],
                        "title": titles.get(f["plan_id"], f["plan_id"]), "low": span[0], "high": span[1],
                        "measured": f["measured_pct"], "inside": inside_range(*span, f["measured_pct"])})
        return out

    def elapsed_s(self) -> float:
        """Wall time of the run so far (to its last update once it has ended)."""
        end = self.taken_at if self.run["status"] == "running" else self.run["updated"]
        return max(0.0, end - self.run["created"])

    # --- the numbers a paper reports ---------------------------------------------------------
    @cached_property
    def busy_fractions(self) -> list[float]:
        """Per evaluation slot, the fraction of the run's wall time (every session it had that slot) in
        which an evaluation was in flight on it. Empty for runs stored before schema 4."""
        busy: dict[int, list[float]] = {}
        for row in self.slot_times:
            total = busy.setdefault(row["slot"], [0.0, 0.0])
            total[0] += row["busy_s"]
            total[1] += row["wall_s"]
        return [round(min(1.0, b / w), 4) if w > 0 else 0.0 for _, (b, w) in sorted(busy.items())]

    def session_of(self, candidate: Candidate | None) -> float | None:
        """When the session (of the run's sessions: its start and each resume) that judged `candidate` began;
        None where that is not known (a run stored before slot times were, a candidate never judged)."""
        starts = sorted({row["session"] for row in self.slot_times})
        if candidate is None or candidate.evaluated is None or not starts:
            return None
        return max((t for t in starts if t <= candidate.evaluated), default=starts[0])

    def metrics(self) -> dict:
        """The run's numbers, as `kscience show --json` reports them: recomputed from the stored rows."""
        evaluated, best, seed = self.evaluated, self.best, self.seed
        ref, compiled = self.eager, self.compiled
        seed_us, best_us = _us(seed), _us(best)
        # A chain is one plan's candidates (or the seed's): repair succeeds when a repair in it passes.
        chains: dict[str, list[Candidate]] = {}
        for c in self.candidates:
            if c.kind in ("seed", "child", "repair"):
                chains.setdefault(c.plan_id or "seed", []).append(c)
        repaired = [ch for ch in chains.values() if any(c.kind == "repair" for c in ch)]
        fixed = [ch for ch in repaired if any(c.kind == "repair" and c.status == OK for c in ch)]
        drafts = [c for c in self.candidates if c.kind in ("child", "repair") and c.edits_total]
        edits_total = sum(c.edits_total for c in drafts)
        edits_applied = sum(c.edits_applied for c in drafts)
        measured = [p for p in self.predictions() if p["measured"] is not None]
        errors = [abs((p["low"] + p["high"]) / 2 - p["measured"]) for p in measured]
        return {
            "n_candidates": len(evaluated), "n_ok": sum(c.status == OK for c in evaluated),
            "n_failed": sum(c.status in REPAIRABLE for c in evaluated),
            "best_id": best.id if best else None, "best_us": best_us, "seed_us": seed_us,
            "eager_us": _us(ref), "compiled_us": _us(compiled),
            "compiled_status": compiled.status if compiled else None,
            "compiled_message": compiled.message if compiled and compiled.status != OK else None,
            "speedup_vs_seed": speedup(seed_us, best_us), "speedup_vs_eager": speedup(_us(ref), best_us),
            "speedup_vs_compiled": speedup(_us(compiled), best_us),
            # the baseline that counts, and whether the best computes far less precisely than the reference
            "faster_us": self.faster_us(), "speedup_vs_faster": speedup(self.faster_us(), best_us),
            "precision_best": best.precision if best else {},
            "n_reduced_precision": sum(c.reduced_precision for c in evaluated),
            "vendor_us": _us(self.vendor), "vendor_status": self.vendor and self.vendor.status,
            "vendor_label": self.vendor and self.vendor.hypothesis,
            "vendor_message": self.vendor and self.vendor.status != OK and self.vendor.message or None,
            "speedup_vs_vendor": speedup(_us(self.vendor), best_us),
            **_alone(first_of_kind(self.candidates, "vendor_alone")),
            "libraries": [{"label": c.hypothesis, "us": _us(c), "status": c.status,
                           "message": c.message if c.status != OK else None} for c in self.libraries],
            **fastest_baseline(ref, compiled, self.vendor, self.libraries, best_us),
            "n_composites": sum(c.kind == "composite" and c.status != PENDING for c in self.candidates),
            # Which machine judged each figure (kscience.run.confirm): a run's figures compare only on one.
            "hosts": sorted({h for h in map(_host, self.candidates) if h}),
            "figure_hosts": {"eager": _host(ref), "compiled": _host(compiled), "vendor": _host(self.vendor),
                             "seed": _host(seed), "best": _host(best)},
            "best_kind": best.kind if best else None,
            "evaluated_to_best": evaluated.index(best) + 1 if best in evaluated else None,
            "iterations_done": self.iterations_done,
            "repairs_tried": len(repaired), "repairs_succeeded": len(fixed),
            "repair_attempts": sum(c.kind == "repair" for c in self.candidates),
            "repair_success_rate": len(fixed) / len(repaired) if repaired else None,
            "edits_total": edits_total, "edits_applied": edits_applied,
            "edit_apply_rate": edits_applied / edits_total if edits_total else None,
            "uplift": [{"plan_id": p["plan_id"], "candidate_id": p["candidate_id"], "iteration": p["iteration"],
                        "predicted_min_pct": p["low"], "predicted_max_pct": p["high"], "measured_pct": p["measured"]}
                       for p in measured],
            "uplift_in_range": sum(bool(p["inside"]) for p in measured),
            "uplift_mean_abs_error_pct": sum(errors) / len(errors) if errors else None,
            "llm": self.usage,
            "sol_worst": (self.sol_summary(best) or {}).get("worst"),
            "sol_median": (self.sol_summary(best) or {}).get("median"),
            "sol_best": [{"shape": shape_label(x["shape"]), "fraction": x["fraction"], "bound": x["bound"]}
                         for x in self.sol(best)],
            "n_profiled": sum(p.get("ncu") is not None for p in self.profiles),
            "profile_s_total": (sum(p.get("profile_s") or 0.0 for p in self.profiles)
                                if any(p.get("ncu") for p in self.profiles) else None),
            "profile_share": (sum(p.get("profile_s") or 0.0 for p in self.profiles) / self.slot_s
                              if self.slot_s and any(p.get("ncu") for p in self.profiles) else None),
            "n_flagged": sum(bool(p.get("flag")) for p in self.profiles),
            "kernels_best": self.kernel_split(best),
            "output_best": best.result.output or None if best and best.result else None,
            "timing_label": self.timing_label or None, "device": self.device if self.settled else None,
            "busy_per_slot": self.busy_fractions,
            # Seed and best timed by different sessions (a resume): their ratio mixes two moments' machine load.
            "seed_best_sessions_differ": (self.session_of(seed) != self.session_of(best)
                                          if best and seed and self.session_of(best) is not None else False),
        }

    def listing(self) -> dict:
        """The run's row with the few numbers `kscience runs` lists."""
        return {**self.run, "iterations_done": self.iterations_done, "n_candidates": len(self.evaluated),
                "seed_us": _us(self.seed), "best_us": _us(self.best), "eager_us": _us(self.eager),
                "interpreted": bool(self.device.get("interpreted")), "device_name": self.device.get("name")}


def _us(candidate: Candidate | None) -> float | None:
    return candidate.geomean_us if candidate else None


def _faster(eager: Candidate | None, compiled: Candidate | None) -> float | None:
    """The faster of PyTorch eager and torch.compile (record.candidate.faster_of_eager_and_compile)."""
    return faster_of_eager_and_compile(_us(eager), _us(compiled), compiled is not None and compiled.status != PENDING)


def run_metrics(store: Store, run_id: str) -> dict:
    """`Snapshot.metrics` of a stored run."""
    return Snapshot.load(store, run_id).metrics()


def run_listing(store: Store) -> list[dict]:
    """Every stored run, newest first, with its iterations, candidates and seed, best and PyTorch eager times."""
    return [Snapshot.load(store, row["id"]).listing() for row in store.list_runs()]
