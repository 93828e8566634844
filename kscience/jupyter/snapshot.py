"""One consistent reading of a run from the store, shared by every view of it.

The dashboard, the text summary, the run object's HTML and the report figures all draw from a
`Snapshot`, never from event payloads, so a run that is watched live, reopened later, or followed
from another process looks the same: the database is the only source of truth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

from kscience.problems import geomean, shape_label
from kscience.store import BASELINE_KINDS, PENDING, Store

BENCHMARK = "benchmark"


@dataclass(frozen=True)
class Baselines:
    """Horizontal lines a kernel's time is judged against, in microseconds (None: not available)."""

    reference_us: float | None  # PyTorch eager (the problem's eager kernel, else its reference), timed by the run
    compile_us: float | None  # torch.compile of the reference, timed by runs on a GPU
    compile_status: str | None  # the torch.compile candidate's status; None: the run stored none
    floor_us: float | None  # geomean over benchmark shapes of bytes/bandwidth or FLOPs/rate
    interpreted: bool  # CPU interpreter timings: no physical floor exists

    def missing(self) -> list[str]:
        """Why each absent line is absent, for a legend or a caption."""
        notes = []
        if self.reference_us is None:
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


def shape_times(candidate: dict) -> dict[str, float]:
    """Median time per benchmark shape of an evaluated candidate, keyed by shape label."""
    shapes = (candidate.get("result") or {}).get("shapes") or []
    return {shape_label(s["shape"]): s["time_us"] for s in shapes if s.get("phase") == BENCHMARK and s.get("time_us")}


def error_text(candidate: dict) -> str:
    """What went wrong with a failed candidate: the verdict, the failing shape and the output tail."""
    result = candidate.get("result") or {}
    lines = [f"{candidate['status']}: {candidate['message']}"]
    if result.get("failing_shape"):
        lines.append(f"failing shape: {shape_label(result['failing_shape'])}")
    tail = ((result.get("stdout_tail") or "") + (result.get("stderr_tail") or "")).strip()
    if tail:
        lines += ["", tail[-2000:]]
    return "\n".join(lines)


@dataclass
class Snapshot:
    run: dict
    candidates: list[dict]  # store rows in creation order
    plans: list[dict]
    findings: list[dict]
    usage: dict  # store.llm_usage
    taken_at: float

    @classmethod
    def load(cls, store: Store, run_id: str) -> "Snapshot":
        return cls(run=store.run(run_id), candidates=store.candidates(run_id), plans=store.plans(run_id),
                   findings=store.findings(run_id), usage=store.llm_usage(run_id), taken_at=time.time())

    # --- the population ----------------------------------------------------------------------
    @cached_property
    def by_id(self) -> dict[str, dict]:
        return {c["id"]: c for c in self.candidates}

    def _first(self, kind: str) -> dict | None:
        return next((c for c in self.candidates if c["kind"] == kind), None)

    @property
    def seed(self) -> dict | None:
        return self._first("seed")

    @property
    def reference(self) -> dict | None:
        return self._first("reference")

    @property
    def compiled(self) -> dict | None:
        return self._first("compiled")

    @cached_property
    def settled(self) -> list[dict]:
        """Population members with a verdict (evaluated, or never written), in the order they got it."""
        done = [c for c in self.candidates if c["kind"] not in BASELINE_KINDS and c["status"] != PENDING]
        return sorted(done, key=lambda c: (c["evaluated"] or c["created"], c["seq"]))

    @cached_property
    def correct(self) -> list[dict]:
        return [c for c in self.settled if c["status"] == "ok" and c["geomean_us"]]

    @property
    def best(self) -> dict | None:
        return min(self.correct, key=lambda c: c["geomean_us"]) if self.correct else None

    def ranked(self) -> list[dict]:
        """Correct candidates fastest first, then the failed ones newest first."""
        failed = [c for c in self.settled if c not in self.correct]
        return sorted(self.correct, key=lambda c: c["geomean_us"]) + failed[::-1]

    def best_so_far(self) -> list[tuple[int, float]]:
        """(position in `settled`, best time up to and including it) at each improvement."""
        steps, best = [], None
        for i, c in enumerate(self.settled):
            if c in self.correct and (best is None or c["geomean_us"] < best):
                best = c["geomean_us"]
                steps.append((i, best))
        return steps

    def speedups(self, candidate: dict) -> tuple[float | None, float | None]:
        """(vs seed, vs reference) of a correct candidate; None where either time is missing."""
        us = candidate.get("geomean_us") if candidate.get("status") == "ok" else None
        seed, ref = self.seed, self.reference
        vs_seed = seed["geomean_us"] / us if us and seed and seed["geomean_us"] else None
        vs_ref = ref["geomean_us"] / us if us and ref and ref["geomean_us"] else None
        return vs_seed, vs_ref

    def children(self) -> dict[str | None, list[dict]]:
        """Lineage: parent id -> its children, in creation order (roots under None)."""
        tree: dict[str | None, list[dict]] = {}
        for c in self.candidates:
            if c["kind"] in BASELINE_KINDS:
                continue
            parent = c["parent_id"] if c["parent_id"] in self.by_id else None
            tree.setdefault(parent, []).append(c)
        return tree

    # --- the run -----------------------------------------------------------------------------
    @property
    def iterations_done(self) -> int:
        """Design rounds started (their plans are stored)."""
        return max((p["iteration"] for p in self.plans), default=0)

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
            if (c.get("result") or {}).get("device"):
                return c["result"]["device"]
        return self.run["environment"].get("device") or {}

    @property
    def timing_label(self) -> str:
        judged = next((c["result"] for c in reversed(self.settled) if c.get("result")), None) or {}
        return judged.get("timing_label") or ""

    def baselines(self) -> Baselines:
        ref, compiled = self.reference, self.compiled
        floors = []
        judged = self.seed if self.seed and self.seed.get("result") else self.best
        for s in ((judged or {}).get("result") or {}).get("shapes") or []:
            if s.get("phase") == BENCHMARK:
                floors.append(s.get("floor_us"))
        interpreted = bool(self.device.get("interpreted"))
        # Under the interpreter there is no hardware to bound: a floor would be meaningless.
        floor = geomean(floors) if floors and all(floors) and not interpreted else None
        return Baselines(reference_us=ref["geomean_us"] if ref and ref["status"] == "ok" else None,
                         compile_us=compiled["geomean_us"] if compiled and compiled["status"] == "ok" else None,
                         compile_status=compiled["status"] if compiled else None,
                         floor_us=floor, interpreted=interpreted)

    def plan_outcomes(self) -> dict[str, dict]:
        """plan id -> its finding (the measured outcome), for plans that have one."""
        return {f["plan_id"]: f for f in self.findings}

    def elapsed_s(self) -> float:
        """Wall time of the run so far (to its last update once it has ended)."""
        end = self.taken_at if self.run["status"] == "running" else self.run["updated"]
        return max(0.0, end - self.run["created"])
