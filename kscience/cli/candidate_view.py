"""`kscience show c-...`: one candidate as a user looks at it: what it tried and what its writer said it
did otherwise than the plan, its verdict on each shape (with its error and the reference's against a
float64 answer), its precision, the judge's message and the candidate's output, the finding recorded on
it, its diff against its parent and its source."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kscience.problems import shape_label
from kscience.problems.precision import RULE, label as precision_label
from kscience.record.candidate import Candidate
from kscience.record.rows import RunRow
from kscience.record.snapshot import error_text
from kscience.record.text import fmt_timing, fmt_us, kind_text
from kscience.run.events import source_diff


@dataclass(frozen=True)
class CandidateDetail:
    """The candidate with its run, its finding (or None) and its diff against its parent ("" without one)."""

    candidate: Candidate
    run: RunRow
    finding: str | None
    diff: str

    def to_dict(self) -> dict:
        """What `kscience show c-... --json` prints: the candidate's row, its run named, the finding, the diff."""
        run = self.run
        return {"candidate": self.candidate.to_row(), "run": {"id": run.id, "problem": run.problem, "name": run.name},
                "finding": self.finding, "diff": self.diff}


def candidate_detail(store, cand_id: str) -> CandidateDetail:
    cand = store.candidate(cand_id)
    run = store.run(cand.run_id)
    findings = [f for f in store.findings(run.id) if f.candidate_id == cand_id]
    if not findings and cand.plan_id:
        findings = [f for f in store.findings(run.id) if f.plan_id == cand.plan_id]
    parent = store.candidate(cand.parent_id) if cand.parent_id else None
    return CandidateDetail(candidate=cand, run=run, finding=findings[-1].text if findings else None,
                           diff=source_diff(parent.source, cand.source) if parent else "")


def candidate_lines(detail: CandidateDetail) -> list[str]:
    cand, run = detail.candidate, detail.run
    parent = f", from {cand.parent_id}" if cand.parent_id else ""
    lines = [f"candidate {cand.id}: {kind_text(cand.kind)} of run {run.id} ({Path(run.problem).name}), "
             f"iteration {cand.iteration}{parent}",
             f"tried:   {cand.hypothesis}",
             *([f"deviations (the writer's note on what it did otherwise than the plan): {cand.deviations}"]
               if cand.deviations else []),
             f"verdict: {cand.status}" + (f", geomean {fmt_us(cand.geomean_us, ' us')}" if cand.geomean_us else "")]
    if cand.result and cand.result.build_s:
        lines.append(f"build:   {cand.result.build_s:.1f} s of compilers in the worker (not counted against any step "
                     "limit)")
    for s in cand.result.shapes if cand.result else []:
        t = fmt_timing(s.time_us, s.std_us, s.n) if s.time_us else ""
        clock = f"  by {s.clock}" if s.time_us and s.clock else ""
        why = f"  {s.message}" if s.message and (not s.ok or s.clock != "cuda events") else ""
        # the shape's own errors against float64: the candidate's, then the reference's
        errors = f"  err {s.err_f64:.1e} (reference {s.ref_err_f64:.1e})" if s.err_f64 is not None else ""
        lines.append(f"  {'ok ' if s.ok else 'BAD'} {s.phase:<9} {shape_label(s.shape):<28} {t}{clock}{errors}{why}"
                     .rstrip())
    if cand.precision:
        lines.append(f"precision: {precision_label(cand.precision)}"
                     + (f"; {RULE}" if cand.precision.get("reduced") else ""))
    if cand.status not in ("ok", "pending"):
        lines += ["", *error_text(cand).splitlines()]
    elif cand.message:
        lines.append(f"message: {cand.message}")
    lines.append(f"finding: {detail.finding or 'none recorded'}")
    if detail.diff:
        lines += ["", f"--- diff against its parent {cand.parent_id} ---", detail.diff.rstrip("\n")]
    lines += ["", "--- source ---", cand.source.rstrip("\n")]
    return lines
