"""HTML and plain-text panels of a run: header, hypotheses, diffs, leaderboard and lineage.

Plain functions of a `Snapshot`, returning strings, so the widget dashboard, the run object's
`_repr_html_` and the headless text summary say the same things. Styles are inline because a
saved notebook's HTML is shown without its stylesheets; every string from a model or a kernel
is escaped.
"""

from __future__ import annotations

import difflib
import html
from dataclasses import dataclass

from kscience.record.liveness import display_status
from kscience.record.rows import FindingRow, PlanRow
from kscience.record.snapshot import Snapshot, error_text, inside_range
from kscience.problems.precision import label as precision_label
from kscience.record.text import FASTER, US, fmt_busy, fmt_pct, fmt_sol, fmt_us, fmt_x, kind_text, why_chosen_text
from kscience.scientist.briefing import versions_text
from kscience.record.candidate import Candidate, predicted_range, speedup
from kscience.record.text import kernel_split_text
from kscience.record.summary import budget_parts

BOX = "font-family: var(--jp-ui-font-family, sans-serif); font-size: 12px; line-height: 1.4;"
TABLE = "border-collapse: collapse; font-size: 12px;"
CELL = "padding: 2px 8px; border-bottom: 1px solid #e0e0e0; text-align: left;"
NUM = ("padding: 2px 8px; border-bottom: 1px solid #e0e0e0; text-align: right; white-space: nowrap; "
       "font-variant-numeric: tabular-nums;")
STATUS_STYLE = {"ok": "color: #2e7d32;", "pending": "color: #757575;"}
FAILED_STYLE = "color: #c62828;"
EAGER = "PyTorch eager"  # the one name of the eager PyTorch baseline, on every panel

def esc(value) -> str:
    return html.escape(str(value), quote=True)


def _status(status: str) -> str:
    return f'<span style="{STATUS_STYLE.get(status, FAILED_STYLE)}">{esc(status)}</span>'


# --- header -----------------------------------------------------------------------------------
def header_facts(snap: Snapshot) -> list[tuple[str, str]]:
    run, env = snap.run, snap.run.environment
    device = snap.device.name or "unknown device"
    model = env.get("model") if env.get("model") not in (None, run.llm) else None
    llm = run.llm + (f" ({model})" if model else "") + f", {run.strategy}"
    best = snap.best
    vs_seed, vs_ref = snap.speedups(best) if best else (None, None)
    best_text = (f"{best.id}: {fmt_us(best.geomean_us, US)}, {fmt_x(vs_seed)} vs seed, {fmt_x(vs_ref)} vs {EAGER}"
                 if best else "none yet")
    compiled, faster = snap.compiled, snap.faster_us()
    if best and compiled and compiled.ok:
        best_text += f", {fmt_x(best.speedup_over(compiled))} vs torch.compile"
    if best and faster:
        best_text += f", {fmt_x(speedup(faster, best.geomean_us))} vs {FASTER}"
    facts = [("problem", run.problem), ("device", device), ("timing", snap.timing_label or "not yet"),
             ("LLM", llm), ("best", best_text)]
    if best and best.precision:  # how far its error is from the reference's own, against float64
        facts.append(("precision (best)", precision_label(best.precision)))
    versions = versions_text(snap.device)
    if versions:
        facts.insert(2, ("software", versions))
    beaten = [(name, base) for name, base in (("torch.compile", snap.compiled), ("vendor library", snap.vendor),
                                              (EAGER, snap.eager),
                                              *((c.hypothesis.split(";")[0], c) for c in snap.libraries))
              if best and base and base.status == "ok" and base.geomean_us < best.geomean_us]
    if beaten and not snap.device.interpreted:  # said plainly: a user would pick the baseline
        facts.append(("loses to", ", ".join(f"{name} ({fmt_us(b.geomean_us, US)})" for name, b in beaten)))
    sol = snap.sol_summary(best)
    if sol is not None:  # only with a roofline bound: GPU timings on a known device
        facts.append(("speed of light", fmt_sol(sol)))
    split = snap.kernel_split(best)
    if split:  # the best kernel's time per launched kernel, on its first timed shape
        facts.append(("kernels (best)", f"{split[0].shape}: {kernel_split_text(split[0].kernels)}"))
    if snap.busy_fractions:
        facts.append(("evaluator busy", fmt_busy(snap.busy_fractions)))
    return facts


def header_html(snap: Snapshot, session_s: float | None = None) -> str:
    facts = [*header_facts(snap), ("budget used", " &middot; ".join(esc(p) for p in budget_parts(snap.run.config, snap.usage, snap.elapsed_s(), session_s)))]
    cells = "".join(f'<span style="margin-right: 18px;"><b>{esc(k)}</b> {v if k == "budget used" else esc(v)}</span>'
                    for k, v in facts)
    title = f"kscience run {esc(snap.run.id)}" + (f" &ldquo;{esc(snap.run.name)}&rdquo;"
                                                     if snap.run.name != snap.run.id else "")
    return f'<div style="{BOX}"><div style="font-size: 14px; font-weight: 600;">{title}</div>{cells}</div>'


@dataclass(frozen=True)
class Stage:
    """What one line of work is doing: a stage change, or an evaluation waiting on a queue (as its detail)."""

    stage: str
    iteration: int
    detail: str
    line: int


def stage_of(event) -> Stage:
    if event.type == "evaluation_waiting":
        return Stage("evaluate", event.iteration, f"{event.candidate_id} waiting {event.waited_s:.0f} s: "
                                                  f"{event.state}", event.line)
    return Stage(event.stage, event.iteration, event.detail, event.line)


def note_stage(stages: dict[int, Stage], event) -> None:
    """Keep the latest stage of each line of work (`stages`: line -> stage_of); a line that ended is dropped."""
    stage = stage_of(event)
    stages.pop(stage.line, None)  # re-inserted last: the newest stage is the dict's last entry
    if stage.stage != "line ended":
        stages[stage.line] = stage


LINE_WORDS = {"select": "selecting", "design": "designing", "write": "writing", "queued": "waiting for the evaluator",
              "evaluate": "evaluating", "repair": "repairing", "finding": "recording its finding",
              "profile": "profiling", "compose": "composing per-shape winners"}


def stage_text(snap: Snapshot, stages: dict[int, Stage] | None, stopping: bool = False) -> str:
    """What the run is doing now: the latest stage of each line (note_stage) while it runs, its final status
    afterwards."""
    status = display_status(snap.run)
    if status != "running":
        error = f": {snap.run.error}" if snap.run.error else ""
        return f"{status} with {snap.iterations_complete} of {snap.target} iteration(s) complete{error}"
    prefix = "stop requested, ending after the current evaluation; " if stopping else ""
    lines = {n: s for n, s in (stages or {}).items() if n}
    if len(lines) > 1:
        return prefix + "; ".join(f"line {n}: {LINE_WORDS.get(s.stage, s.stage)}"
                                  f"{' ' + s.detail if s.detail else ''} (iteration {s.iteration})"
                                  for n, s in sorted(lines.items()))
    stage = list(stages.values())[-1] if stages else None
    if not stage:
        return f"{prefix}running, {snap.iterations_complete} of {snap.target} iteration(s) complete"
    detail = f" {stage.detail}" if stage.detail else ""
    where = f"iteration {stage.iteration} of {snap.target}" if stage.iteration else "before iteration 1"
    return f"{prefix}{stage.stage}{detail} ({where})"


# --- hypotheses -------------------------------------------------------------------------------
def _predicted(plan: PlanRow) -> str:
    span = predicted_range(plan.predicted_min_pct, plan.predicted_max_pct)
    if span is None:
        return "no prediction"
    low, high = span
    return f"{low:+.0f}% to {high:+.0f}%" if high != low else f"{low:+.0f}%"


def _plan_candidate(snap: Snapshot, plan: PlanRow) -> Candidate | None:
    """The newest settled kernel written for a plan (its child or last repair), if any."""
    written = [c for c in snap.settled if c.plan_id == plan.id]
    return written[-1] if written else None


def _measured(snap: Snapshot, plan: PlanRow, pct: float | None, cand: Candidate | None) -> str:
    inside = inside_range(plan.predicted_min_pct, plan.predicted_max_pct, pct)
    colour = STATUS_STYLE["ok"] if pct >= 0 else "color: #ef6c00;"
    return (f'<span style="{colour}"><b>{fmt_pct(pct)}</b></span> measured '
            f'({"inside" if inside else "outside"} the prediction) by {esc(cand.id if cand else "?")}')


def _outcome(snap: Snapshot, plan: PlanRow, finding: FindingRow | None) -> str:
    if not plan.chosen:
        return '<span style="color: #757575;">not run</span>'
    if finding is None:
        # A stop can land between the verdict and the finding: the verdict is the outcome then.
        cand = _plan_candidate(snap, plan)
        base = snap.by_id.get(plan.base_id)
        if cand is not None and cand.ok:
            pct = cand.uplift_over(base.geomean_us if base else None)
            if pct is not None:
                return _measured(snap, plan, pct, cand)
        if cand is not None:
            return f"{_status(cand.status)} ({esc(cand.id)})"
        state = "in progress" if display_status(snap.run) == "running" else "pending (resume the run to evaluate it)"
        return f'<span style="color: #757575;">{state}</span>'
    cand = snap.by_id.get(finding.candidate_id)
    if finding.measured_pct is not None:
        return _measured(snap, plan, finding.measured_pct, cand)
    return f"{_status(cand.status if cand else 'no kernel')} ({esc(cand.id if cand else 'no candidate')})"


def hypotheses_html(snap: Snapshot) -> str:
    """Each design round, newest first: the base it built on and every plan with its prediction,
    whether it was chosen, and the measured outcome once evaluated."""
    if not snap.plans:
        return f'<div style="{BOX} color: #757575;">No experiments designed yet.</div>'
    outcomes = snap.plan_outcomes()
    rounds: dict[int, list[PlanRow]] = {}
    for p in snap.plans:
        rounds.setdefault(p.iteration, []).append(p)
    parts = []
    for iteration in sorted(rounds, reverse=True):
        plans = rounds[iteration]
        first = plans[0]
        parts.append(f'<div style="margin: 6px 0 2px 0;"><b>Iteration {iteration}</b> from '
                     f'<code>{esc(first.base_id)}</code>: <i>{esc(first.justification)}</i></div>')
        for p in plans:
            body = p.plan
            why = why_chosen_text(p.why_chosen)
            chosen = (f'<span style="background: #e8f5e9; padding: 0 4px;">chosen as {esc(why)}</span>'
                      if p.chosen else '<span style="color: #9e9e9e;">not chosen</span>')
            finding = outcomes.get(p.id)
            note = (f'<div style="color: #424242; margin-left: 12px;">finding: {esc(finding.text)}</div>'
                    if finding and finding.text else "")
            parts.append(
                f'<div class="kscience-hypothesis" style="margin: 2px 0 6px 10px; '
                f'opacity: {1.0 if p.chosen else 0.65};">'
                f'<b>{esc(p.title)}</b> {chosen} &middot; predicted {esc(_predicted(p))} &middot; '
                f'{_outcome(snap, p, finding)}'
                f'<div style="margin-left: 12px;">{esc(body.get("rationale", ""))}</div>{note}</div>')
    return f'<div style="{BOX}">{"".join(parts)}</div>'


# --- diffs ------------------------------------------------------------------------------------
def unified_diff(before: str, after: str, before_name: str, after_name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        before_name, after_name))


CODE = ("margin: 0; font-size: 11px; line-height: 1.35; font-family: var(--jp-code-font-family, monospace); "
        "white-space: pre-wrap; word-break: normal; overflow-wrap: normal;")  # long lines wrap at spaces
DIFF_LINE = {"+": "background: #e6ffec;", "-": "background: #ffebe9;", "@": "color: #6f42c1; background: #f6f8fa;"}


def _python_spans(code: str) -> str:
    from pygments import highlight as render
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return render(code, PythonLexer(), HtmlFormatter(nowrap=True, noclasses=True, style="default")).rstrip("\n")


def log_html(lines: list[str]) -> str:
    """The run's log (kscience.run.log: the lines `kscience run` prints), newest last."""
    if not lines:
        return f'<div style="{BOX} color: #757575;">Nothing logged yet.</div>'
    return f'<pre style="{CODE}">{esc(chr(10).join(lines))}</pre>'


def highlight(code: str, language: str) -> str:
    """Syntax-highlighted HTML with inline styles (no stylesheet needed). A diff keeps Python
    colours on every line, added and removed lines on a green or red ground."""
    if language != "diff":
        return f'<pre style="{CODE}">{_python_spans(code)}</pre>'
    rows = []
    for line in code.splitlines():
        mark = line[:1]
        if line.startswith(("+++", "---")) or mark == "@":
            rows.append(f'<div style="{DIFF_LINE["@"]}">{esc(line)}</div>')
            continue
        body = line[1:] if mark in "+- " else line
        sign = esc(mark) if mark in "+-" else " "
        rows.append(f'<div style="{DIFF_LINE.get(mark, "")}">{sign}{_python_spans(body) or " "}</div>')
    return f'<pre style="{CODE}">{"".join(rows)}</pre>'


def candidate_label(c: Candidate) -> str:
    us = f", {fmt_us(c.geomean_us, US)}" if c.geomean_us else ""
    return f"{c.id} {kind_text(c.kind)} ({c.status}{us}): {c.hypothesis[:60]}"


def diff_html(snap: Snapshot, candidate_id: str | None) -> str:
    """Parent -> child diff of one candidate, syntax-highlighted; a failed one also shows its error."""
    cand = snap.by_id.get(candidate_id) if candidate_id else None
    if cand is None:
        return f'<div style="{BOX} color: #757575;">No candidate written yet.</div>'
    parent = snap.by_id.get(cand.parent_id)
    title = (f"<b>{esc(cand.id)}</b> {esc(kind_text(cand.kind))}: {esc(cand.hypothesis)} &middot; "
             f"{_status(cand.status)}")
    parts = [f'<div style="margin-bottom: 4px;">{title}</div>']
    if cand.status not in ("ok", "pending"):
        parts.append(f'<pre class="kscience-error" style="{FAILED_STYLE} white-space: pre-wrap; margin: 0 0 6px 0; '
                     f'font-size: 11px; background: #fff5f5; padding: 4px;">{esc(error_text(cand))}</pre>')
    if not cand.source:
        parts.append('<div style="color: #757575;">The writer produced no source.</div>')
    elif parent is None:
        parts.append(f'<div style="color: #757575;">No parent: the full source.</div>'
                     f'<div class="kscience-source">{highlight(cand.source, "python")}</div>')
    else:
        diff = unified_diff(parent.source, cand.source, f"{parent.id} (parent)", cand.id)
        parts.append(f'<div class="kscience-diff">{highlight(diff, "diff")}</div>' if diff else
                     '<div style="color: #757575;">Same source as the parent.</div>')
    return f'<div style="{BOX}">{"".join(parts)}</div>'


# --- leaderboard and lineage ------------------------------------------------------------------
@dataclass(frozen=True)
class LeaderRow:
    """One settled candidate on the leaderboard: its rank among correct kernels (None when it failed)."""

    rank: int | None
    id: str
    kind: str
    iteration: int
    geomean_us: float | None
    vs_seed: float | None
    vs_eager: float | None
    status: str
    hypothesis: str
    reduced_precision: bool
    precision: str


def leaderboard_rows(snap: Snapshot) -> list[LeaderRow]:
    """Every settled candidate, correct kernels fastest first."""
    rows = []
    for rank, c in enumerate(snap.ranked(), start=1):
        vs_seed, vs_ref = snap.speedups(c)
        rows.append(LeaderRow(rank=rank if c.ok else None, id=c.id, kind=c.kind, iteration=c.iteration,
                              geomean_us=c.geomean_us if c.ok else None, vs_seed=vs_seed, vs_eager=vs_ref,
                              status=c.status, hypothesis=c.hypothesis, reduced_precision=c.reduced_precision,
                              precision=precision_label(c.precision)))
    return rows


# Fixed column widths, so the table fits its panel at any width: the hypothesis takes what is left
# and ends in an ellipsis, its full text in the tooltip.
TIGHT = "padding: 2px 4px;"  # narrower cells than elsewhere: the leaderboard shares its row with the plot
LEADERBOARD_COLUMNS = (("#", "2em", NUM), ("id", "7.6em", CELL), ("time", "9.4em", NUM),  # CPU: 1,804,694.4 us
                       ("vs seed", "5em", NUM), ("vs eager", "6em", NUM), ("hypothesis", "auto", CELL))
CLIP = "overflow: hidden; text-overflow: ellipsis; white-space: nowrap;"


def leaderboard_html(snap: Snapshot, limit: int | None = 15) -> str:
    rows = leaderboard_rows(snap)
    if not rows:
        return f'<div style="{BOX} color: #757575;">No candidate evaluated yet.</div>'
    shown = rows if limit is None else rows[:limit]
    cols = "".join(f'<col style="width: {w};">' for _, w, _ in LEADERBOARD_COLUMNS)
    head = "".join(f'<th style="{style} {TIGHT} {CLIP}" title="{esc(tip)}">{esc(h)}</th>' for (h, _, style), tip in zip(
        LEADERBOARD_COLUMNS, ("rank among correct kernels", "candidate", "geomean over the benchmark shapes (us), "
                              "or why the kernel failed", "speedup over the seed", f"speedup over {EAGER}",
                              "the hypothesis the kernel tested"), strict=True))
    body = []
    for r in shown:
        time = (fmt_us(r.geomean_us, US) if r.status == "ok"
                else _status(r.status.replace("_", " ")))
        num, cell = f"{NUM} {TIGHT} {CLIP}", f"{CELL} {TIGHT} {CLIP}"
        # a reduced-precision kernel says so before its hypothesis, the errors in the tooltip
        marked = (f'<span style="color: #ef6c00;" title="{esc(r.precision)}">reduced precision</span> '
                  if r.reduced_precision else "")
        body.append(f'<tr><td style="{num}">{r.rank or ""}</td>'
                    f'<td style="{cell}" title="{esc(r.id)} ({esc(r.kind)}, iteration {r.iteration})">'
                    f'<span style="font-family: var(--jp-code-font-family, monospace);">{esc(r.id)}</span></td>'
                    f'<td style="{num}" title="{esc(r.status)}">{time}</td>'
                    f'<td style="{num}">{fmt_x(r.vs_seed)}</td><td style="{num}">{fmt_x(r.vs_eager)}</td>'
                    f'<td style="{cell}" title="{esc(r.hypothesis)}">{marked}{esc(r.hypothesis)}</td></tr>')
    more = f'<div style="color: #757575;">and {len(rows) - len(shown)} more</div>' if len(rows) > len(shown) else ""
    ref_line = "".join(f'<div style="color: #424242;">{name}: {fmt_us(base.geomean_us, US)}</div>'
                       for name, base in ((EAGER, snap.eager), ("torch.compile", snap.compiled),
                                          ("vendor library", snap.vendor),
                                          *((c.hypothesis.split(";")[0], c) for c in snap.libraries))
                       if base and base.status == "ok")
    if snap.faster_us():
        ref_line += f'<div style="color: #424242;">{esc(FASTER)}: {fmt_us(snap.faster_us(), US)}</div>'

    return (f'<div style="{BOX}"><table class="kscience-leaderboard" style="{TABLE} table-layout: fixed; '
            f'width: 100%; font-size: 11px;"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>{more}{ref_line}</div>')


def lineage_lines(snap: Snapshot) -> list[str]:
    """The lineage as an indented tree, one candidate a line, the best marked with a star."""
    tree, best = snap.children(), snap.best
    lines: list[str] = []

    def walk(c: Candidate, prefix: str, last: bool, root: bool) -> None:
        mark = "" if root else ("└─ " if last else "├─ ")
        time_text = fmt_us(c.geomean_us, US) if c.status == "ok" and c.geomean_us else c.status
        star = " ★" if best is not None and c.id == best.id else ""
        lines.append(f"{prefix}{mark}{c.id} {time_text}{star}  {c.hypothesis[:50]}")
        kids = tree.get(c.id, [])
        for i, kid in enumerate(kids):
            walk(kid, prefix + ("" if root else ("   " if last else "│  ")), i == len(kids) - 1, False)

    for root in tree.get(None, []):
        walk(root, "", True, True)
    return lines


def lineage_html(snap: Snapshot) -> str:
    lines = lineage_lines(snap)
    if not lines:
        return f'<div style="{BOX} color: #757575;">No lineage yet.</div>'
    return (f'<pre class="kscience-lineage" style="font-size: 11px; margin: 0; max-height: 260px; overflow: auto; '
            f'white-space: pre;">'
            f'{esc(chr(10).join(lines))}</pre>')
