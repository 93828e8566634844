"""The pieces of the scientist's prompts that describe kernels and what was learnt: a kernel's
profile and headroom, the members the selector is shown, the base and reference kernels as code, the
lessons of earlier experiments, and the findings that fit a prompt's budget. Plain text out, no model
calls (roles.py renders them into `prompts/`)."""

from __future__ import annotations

import re

from kscience.problems.roofline import summary as sol_summary
from kscience.problems.spec import shape_label
from kscience.record.seen import Seen
from kscience.scientist.briefing import format_times
from kscience.scientist.plans import Plan
from kscience.scientist.profile_report import render_headroom, render_profile
from kscience.scientist.prompts import render
from kscience.scientist.quoting import fit_whole
from kscience.scientist.strategy import CandidateView, ranked, seed_of
from kscience.scientist.verdicts import selector_message

SELECTOR_MAX_MEMBERS = 30  # the fastest correct members and the newest failures beyond this are left out
FINDINGS_PROMPT_CHARS = 8000  # newest findings first, each whole, until this much text
LESSON_MAX_CHARS = 1200  # a lesson longer than this keeps its whole sentences that fit


def profile_block(profile: Seen | None) -> str:
    """What a profiler saw of a kernel (compile facts, Nsight Compute counters, speed of light per shape,
    the 'not doing the work' flag); empty when nothing was seen (the CPU interpreter compiles nothing)."""
    if profile is None or not profile.anything:
        return ""
    text = render_profile(profile)
    if profile.sol:
        text += "\nSpeed of light per shape: " + "; ".join(
            f"{shape_label(s.shape)}: {s.fraction:.0%} of the {s.bound} bound" for s in profile.sol) + "."
    return text


def line_block(profile: Seen | None) -> str:
    """The profile block as lines of their own inside a template, or nothing."""
    block = profile_block(profile)
    return block + "\n" if block else ""


def asked_line(plan: Plan, child: CandidateView | None) -> str:
    """What the plan asked to have measured, and whether it came back (a line of the finding prompt)."""
    if not plan.measure:
        return ""
    profile = child.profile if child is not None else None
    got = [m for m in plan.measure if profile is not None and profile.supplies(m)]
    missing = [m for m in plan.measure if m not in got]
    return (f"Asked for: {', '.join(plan.measure)}" + (f"; supplied above: {', '.join(got)}" if got else "")
            + (f"; not supplied: {', '.join(missing)} (not available where it was judged, or the kernel failed)"
               if missing else "") + "\n")


def headroom(view: CandidateView | None) -> str:
    """The designer's headroom for a kernel: how far its slowest shape is from the roofline bound, and
    how to use that; one line saying it is unknown where there is no bound (the CPU interpreter)."""
    sols = view.profile.sol if view is not None and view.profile is not None else []
    return render("headroom.md", line=render_headroom(sols)) if sols else render_headroom(sols)


def _summary(view: CandidateView) -> str:
    time = f"geomean {view.geomean_us:.2f} us" if view.geomean_us else "no time"
    block = profile_block(view.profile)
    return (f"Status {view.status}, {time}, from experiment \"{view.hypothesis}\" (depth {view.depth}).\n"
            f"Per-shape median times: {format_times(view.shape_times)}.\n"
            f"Shapes covered: {view.coverage or 'not recorded'}." + (f"\n{block}" if block else ""))


def has_kernel(source: str) -> bool:
    """Whether a candidate runs work of its own (Triton or load_inline), not only the PyTorch reference."""
    return re.search(r"@triton\.(?:jit|autotune)|load_inline\s*\(", source) is not None


def lesson(text: str) -> str:
    """The model's lesson on one line, whole sentences only: never cut in the middle of one."""
    flat = " ".join(str(text).split())
    if len(flat) <= LESSON_MAX_CHARS:
        return flat
    cut = flat[:LESSON_MAX_CHARS]
    end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
    return cut[:end + 1] if end > 0 else flat.split(". ")[0].rstrip(".") + "."


def kernels_text(base: CandidateView, reference: CandidateView | None) -> str:
    """The base kernel's section, then the reference's when there is one."""
    shown = [("Base kernel", base)] + ([("Reference kernel", reference)] if reference else [])
    return "\n\n".join(render("kernel.md", heading=heading, id=view.id, summary=_summary(view),
                              source=view.source.rstrip("\n")) for heading, view in shown)


def selector_member(view: CandidateView) -> dict:
    member = {"id": view.id, "parent": view.parent_id, "depth": view.depth, "children": view.n_children,
              "status": view.status, "geomean_us": round(view.geomean_us, 3) if view.geomean_us else None,
              "shape_us": {k: round(v, 3) for k, v in view.shape_times.items()},
              "covered": view.coverage, "hypothesis": view.hypothesis, "message": selector_message(view.message)}
    if view.failing_shape is not None:
        member["failed_on"] = shape_label(view.failing_shape)
    profile = view.profile or Seen()
    sol = sol_summary(profile.sol)
    if sol is not None:
        member["speed_of_light"] = {"worst": round(sol.worst, 3), "median": round(sol.median, 3),
                                    "worst_shape": shape_label(sol.worst_shape), "bound": sol.worst_bound}
    facts = profile.compile_facts
    if facts:
        member["compiled"] = {"registers": _most(f.registers for f in facts), "spills": _most(f.spills for f in facts),
                              "tensor_cores": any(f.tensor_core for f in facts)}
    if profile.flag:
        member["warning"] = profile.flag
    return member


def _most(values) -> int | None:
    """The largest known value of a compile fact over a candidate's kernels; None where none is known."""
    return max((v for v in values if v is not None), default=None)


def selector_members(population: list[CandidateView]) -> list[CandidateView]:
    """The seed, the fastest correct members and then the newest others, at most SELECTOR_MAX_MEMBERS."""
    keep = [seed_of(population)]
    for view in ranked(population) + population[::-1]:
        if len(keep) >= SELECTOR_MAX_MEMBERS:
            break
        if view not in keep:
            keep.append(view)
    return keep


def fit_findings(findings: list[str], budget: int = FINDINGS_PROMPT_CHARS) -> str:
    """Newest first, each finding whole; older ones are dropped, and counted, once the budget is spent."""
    # given oldest first; the newest matter most
    lines, left = fit_whole([f"- {' '.join(text.split())}" for text in reversed(findings)], budget)
    if left:
        lines.append(f"- ({left} older finding{'s' if left > 1 else ''} left out whole for the prompt budget)")
    return "\n".join(lines) if lines else "(none yet)"
