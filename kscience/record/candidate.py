"""One kernel a run produced, with its verdict: the record the store returns and every layer above the
evaluator reads (scientist, run, campaigns, the command line and the notebook), and the few numbers read
off candidates (per-shape times, speedups, uplifts, predicted ranges), each computed here once.

It lives with the store that writes it, so the store, the loop and the scientist share one type. A stored verdict is kept exactly as stored (`to_row`, what JSON output and
notebooks show); `result` is its `EvalResult`, and `notes` what a run added to it beyond the evaluator's
fields (kscience.run.confirm: `slower_than`, `unconfirmed`, `replaced`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from kscience.problems import precision as P, shape_label
from kscience.evaluate import result as R
from kscience.evaluate.result import OK, DeviceRecord, EvalResult, ShapeResult

BENCHMARK = "benchmark"
# The kind of the eager PyTorch baseline, shown as "PyTorch eager". Runs stored before it had this name call it
# "reference" (which in KernelBench means the problem's Model): read back, they say "eager" too.
EAGER_KIND = "eager"
_RENAMED_KINDS = {"reference": EAGER_KIND}
# Failures of a candidate's own making: the loop repairs them, the metrics count them as failed.
REPAIRABLE = (R.COMPILE_ERROR, R.RUNTIME_ERROR, R.WRONG_ANSWER, R.CRASHED, R.TIMEOUT)
_RESULT_FIELDS = {f.name for f in fields(EvalResult)}
_SHAPE_FIELDS = {f.name for f in fields(ShapeResult)}


# --- numbers ----------------------------------------------------------------------------------
def speedup(base_us: float | None, us: float | None) -> float | None:
    """How many times faster `us` is than `base_us`; None where either time is missing."""
    return base_us / us if base_us and us else None


def faster_of_eager_and_compile(eager_us: float | None, compiled_us: float | None,
                                compiled_judged: bool) -> float | None:
    """The baseline that counts: the faster of PyTorch eager and torch.compile, as KernelBench v3 and Helion
    report against. PyTorch eager alone where torch.compile was judged and failed (no user can pick it);
    None where torch.compile was never judged (the CPU interpreter, --no-compiled-baseline) or eager has no time,
    since which is faster is then unknown."""
    if not eager_us or not compiled_judged:
        return None
    return min(eager_us, compiled_us) if compiled_us else eager_us


def uplift_pct(base_us: float | None, child_us: float | None) -> float | None:
    """Measured speedup of a child over its base in percent: +25 means the child is 1.25x as fast."""
    ratio = speedup(base_us, child_us)
    return None if ratio is None else (ratio - 1.0) * 100.0


def predicted_range(low: float | None, high: float | None) -> tuple[float, float] | None:
    """A plan's predicted uplift as (low, high) percent; a single number is a range of one point."""
    return None if low is None else (low, high if high is not None else low)


def range_text(span: tuple[float, float]) -> str:
    """A predicted range as a plan states it: "+5..+20%"."""
    return f"{span[0]:+g}..{span[1]:+g}%"


def benchmark_times(shapes: list[ShapeResult], floor: bool = False) -> dict[str, float]:
    """The median time (or, with `floor`, the physical floor) per benchmark shape label; shapes without one are
    left out."""
    out = {}
    for s in shapes:
        us = s.floor_us if floor else s.time_us
        if s.phase == BENCHMARK and us:
            out[shape_label(s.shape)] = us
    return out


def result_from_stored(stored: dict) -> tuple[EvalResult, dict]:
    """(the EvalResult, the run's notes beside it) of a verdict as stored. Fields a stored verdict lacks take
    their defaults and those it has beyond the evaluator's become notes, so a row of any schema reads."""
    known = {k: v for k, v in stored.items() if k in _RESULT_FIELDS}
    known["shapes"] = [ShapeResult(**{k: v for k, v in s.items() if k in _SHAPE_FIELDS})
                       for s in stored.get("shapes") or []]
    return EvalResult(**known), {k: v for k, v in stored.items() if k not in _RESULT_FIELDS}


# --- the record -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Candidate:
    """A row of the candidates table with its verdict parsed; `to_row()` is the row as stored, what JSON
    output shows."""

    id: str
    run_id: str
    seq: int
    parent_id: str | None
    kind: str  # seed, eager, compiled, vendor, library, child, repair, composite...
    iteration: int
    plan_id: str | None
    hypothesis: str
    source: str
    status: str  # an EvalResult status, or pending / write_failed before a verdict
    message: str
    geomean_us: float | None
    result: EvalResult | None
    repair_attempt: int
    write_mode: str | None
    edits_total: int
    edits_applied: int
    created: float
    evaluated: float | None
    deviations: str = ""  # its writer's note on what it did otherwise than the plan ("" before schema 6)
    notes: dict = field(default_factory=dict)  # what the run added to the verdict (module docstring)
    row: dict = field(default_factory=dict, repr=False)  # the row as stored

    @classmethod
    def from_row(cls, row: dict) -> "Candidate":
        if row.get("kind") in _RENAMED_KINDS:
            row = {**row, "kind": _RENAMED_KINDS[row["kind"]]}
        result, notes = result_from_stored(row["result"]) if row.get("result") else (None, {})
        names = {f.name for f in fields(cls)} - {"result", "notes", "row"}
        values = {k: row.get(k) for k in names}
        values["deviations"] = values["deviations"] or ""
        return cls(**values, result=result, notes=notes, row=dict(row))

    def to_row(self) -> dict:
        """The row as stored, the verdict as the JSON it was stored as."""
        return dict(self.row)

    # A candidate is one row: two reads of it are equal when the row is.
    def __eq__(self, other) -> bool:
        return self.row == other.row if isinstance(other, Candidate) else NotImplemented

    __hash__ = None

    # --- what is read off it -----------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def stored_result(self) -> dict:
        """The verdict as stored ({} before one): what a verdict reused for the same source copies."""
        return self.row.get("result") or {}

    @property
    def device(self) -> DeviceRecord:
        """The device its verdict was judged on (an empty record without one)."""
        return self.result.judged_on if self.result else DeviceRecord()

    @property
    def host(self) -> str | None:
        """The host that judged its verdict, where it was recorded."""
        return self.device.host

    @property
    def times(self) -> dict[str, float]:
        """Median time per benchmark shape label ({} before a verdict)."""
        return benchmark_times(self.result.shapes) if self.result else {}

    @property
    def floor_times(self) -> dict[str, float]:
        """The physical floor per benchmark shape label, where the judge knew it."""
        return benchmark_times(self.result.shapes, floor=True) if self.result else {}

    @property
    def precision(self) -> dict:
        """Its verdict's precision (kscience.problems.precision.summary): as its judge recorded it, else read off
        its shapes; {} where none was measured."""
        if not self.result:
            return {}
        return self.result.precision or P.summary(self.result.shapes)

    @property
    def reduced_precision(self) -> bool:
        """Correct, and far less precise than the reference (kscience.problems.precision.RULE)."""
        return self.ok and bool(self.precision.get("reduced"))

    def speedup_over(self, base: "Candidate | None") -> float | None:
        """How many times faster than `base` this correct candidate is; None where either has no time."""
        return speedup(base.geomean_us if base else None, self.geomean_us if self.ok else None)

    def uplift_over(self, base_us: float | None) -> float | None:
        """Percent faster than `base_us` where correct (+25: 1.25x as fast); None otherwise."""
        return uplift_pct(base_us, self.geomean_us) if self.ok else None
