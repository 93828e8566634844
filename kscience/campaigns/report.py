"""A campaign's numbers, in the columns KernelBench and STARK publish, so a table can be set beside theirs.

Per problem: the baseline times (PyTorch eager, torch.compile), the seed's time, the best kernel's
time and precision, status, attempts and LLM cost. Per suite: the success rate, fast_p for p in FAST_P
against eager, against torch.compile and against the faster of the two (the baseline that counts, as
KernelBench v3 and Helion report against), the geometric-mean speedup, attempts and cost. Wall time,
GPU-hours, busy fraction, tokens and $ per problem and in total are `usage.py`'s.

Definitions (after KernelBench, Ouyang et al. 2025, and its `fastp` code):
* the kernel of a problem ("best child") is the fastest correct candidate the scientist wrote
  (children, repairs, composites); the seed is the starting point, not an answer, and the baselines
  are not candidates. `kscience runs` and `show` count the seed in their "best"; the report says
  which it counts under its table;
* speedup = baseline time / kernel time, both measured by the same judge in the same run;
* fast_p = the share of problems whose kernel is correct and whose speedup is greater than p;
  fast_0 is therefore the correctness (success) rate;
* the denominator is every problem of the campaign that was evaluated: skipped problems (did not
  fit the device, cannot be loaded) are counted apart, and a problem whose run failed counts as
  not correct. Against torch.compile, only problems where torch.compile was timed count (it is
  not timed under the CPU interpreter), and their number is given as `n`; against the faster of the two,
  the problems where torch.compile was judged (PyTorch eager alone where it failed);
* the geometric-mean speedup is over the problems with a correct kernel (STARK's mean speedup);
* a best kernel far less precise than the reference (kscience.problems.precision) is marked "reduced
  precision" and still counts, as KernelBench's tolerance counts it; `--precision reference` runs reject them.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

from kscience.campaigns.report_rows import BASELINES, FAST_P, BaselineSummary, CampaignReport, ProblemRow, SuiteSummary
from kscience.campaigns.usage import campaign_usage, run_usage, usage_lines
from kscience.evaluate.result import DeviceRecord
from kscience.problems.precision import RULE, label as precision_label
from kscience.record.candidate import Candidate, faster_of_eager_and_compile, speedup as times_faster
from kscience.record.liveness import display_status
from kscience.record.store import PENDING, Store
from kscience.record.summary import CPU_NOTE, times_rank
from kscience.record.text import FASTER, FASTER_NOTE, fmt_us, fmt_x

BASELINE_NAMES = {"eager": "PyTorch eager", "compiled": "torch.compile", "faster": FASTER,
                  "vendor": "the vendor library",
                  "library": "the best installed library"}
_WRITTEN = ("child", "repair")


def problem_rows(store: Store, campaign_id: str) -> list[ProblemRow]:
    """One row per problem of the campaign, read from the store, with its speedups."""
    rows = []
    for entry in store.campaign_problems(campaign_id):
        row = ProblemRow(position=entry.position, name=entry.name, locator=entry.locator, status=entry.status,
                         reason=entry.reason, run_id=entry.run_id)
        if entry.run_id:
            run = store.run(entry.run_id)
            row = replace(row, status=display_status(run), reason=run.error or entry.reason,
                          **_run_numbers(store, entry.run_id))
            row = replace(row, **_library_numbers(store.candidates(entry.run_id), row))
        row = replace(row, **vars(run_usage(store, entry.run_id)))
        rows.append(replace(row, **{f"speedup_{b}": speedup(row, b) for b in BASELINES}))
    return rows


def _run_numbers(store: Store, run_id: str) -> dict:
    """ProblemRow's fields of a problem's run: its baselines, seed, best child, attempts and cost."""
    cands = store.candidates(run_id)
    by_kind = {c.kind: c for c in cands if c.kind in ("seed", "eager", "compiled", "vendor")}
    written = [c for c in cands if c.kind in _WRITTEN and c.evaluated is not None]
    composites = [c for c in cands if c.kind == "composite" and c.evaluated is not None]
    ok = [c for c in written + composites if c.ok and c.geomean_us]
    best = min(ok, key=lambda c: c.geomean_us) if ok else None
    usage = store.llm_usage(run_id)

    def time_of(kind):
        c = by_kind.get(kind)
        return c.geomean_us if c and c.ok else None

    judged_by = best or by_kind.get("seed")
    judged = judged_by.device if judged_by else DeviceRecord()
    compiled = by_kind.get("compiled")
    faster = faster_of_eager_and_compile(time_of("eager"), time_of("compiled"),
                                         compiled is not None and compiled.status != PENDING)
    return dict(eager_us=time_of("eager"), compiled_us=time_of("compiled"), faster_us=faster,
                vendor_us=time_of("vendor"), seed_us=time_of("seed"),
                best_us=best.geomean_us if best else None, best_id=best.id if best else None,
                precision=best.precision if best else {}, reduced_precision=bool(best and best.reduced_precision),
                attempts=len(written), cost_usd=usage.cost_usd, tokens=usage.tokens,
                # seconds compilers ran in the judges' workers, over every evaluation of the run (not counted as
                # running)
                build_s=round(sum(c.result.build_s for c in cands if c.result), 1),
                device=judged.name, interpreted=bool(judged.interpreted))


def _library_numbers(cands: list[Candidate], row: ProblemRow) -> dict:
    """The fastest installed library that passed, the fastest baseline of all, and whether the best kernel
    beats every baseline that was timed (None: no correct kernel, or no baseline timed)."""
    libs = [c for c in cands if c.kind == "library" and c.ok and c.geomean_us]
    lib = min(libs, key=lambda c: c.geomean_us) if libs else None
    timed = [us for us in (row.eager_us, row.compiled_us, row.vendor_us, lib and lib.geomean_us) if us]
    fastest = min(timed) if timed else None
    return dict(library_us=lib.geomean_us if lib else None, library_label=lib.hypothesis if lib else None,
                fastest_us=fastest, beats_all=row.best_us < fastest if fastest and row.best_us else None)


def beats_line(rows: list[ProblemRow]) -> str:
    """On how many problems the best kernel beats each kind of baseline, and all of them, in one line (the faster
    of eager and torch.compile is no kind of its own: its fast_p line says it)."""
    evaluated = [r for r in rows if not r.skipped]
    parts = []
    for baseline, name in BASELINE_NAMES.items():
        if baseline == "faster":
            continue
        timed = [r for r in evaluated if r.baseline_us(baseline)]
        won = sum(1 for r in timed if (x := speedup(r, baseline)) is not None and x > 1)
        parts.append(f"{name} on {won} of {len(timed)}")
    every = sum(1 for r in evaluated if r.beats_all)
    return f"the best kernel beats {', '.join(parts)} problems; every baseline on {every} of {len(evaluated)}"


def speedup(row: ProblemRow, baseline: str) -> float | None:
    """How many times faster the problem's best kernel is than `baseline` (None where either is missing)."""
    return times_faster(row.baseline_us(baseline), row.best_us)


def fast_p(rows: list[ProblemRow], p: float, baseline: str = "eager") -> tuple[float | None, int]:
    """(fast_p, number of problems it is over). Skipped problems are not counted; against a
    baseline, only problems where it was timed."""
    counted = [r for r in rows if not r.skipped and r.baseline_us(baseline)]
    if not counted:
        return None, 0
    hits = sum(1 for r in counted if (s := speedup(r, baseline)) is not None and s > p)
    return hits / len(counted), len(counted)


def geomean_speedup(rows: list[ProblemRow], baseline: str = "eager") -> float | None:
    values = [s for r in rows if not r.skipped and (s := speedup(r, baseline))]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def suite_summary(rows: list[ProblemRow]) -> SuiteSummary:
    """The per-suite columns of KernelBench and STARK, from per-problem rows."""
    evaluated = [r for r in rows if not r.skipped]
    correct = sum(1 for r in evaluated if r.best_us)
    attempts = sum(r.attempts for r in evaluated)
    return SuiteSummary(
        n_problems=len(rows), n_evaluated=len(evaluated), n_skipped=len(rows) - len(evaluated), n_correct=correct,
        success_rate=correct / len(evaluated) if evaluated else None, attempts=attempts,
        attempts_per_problem=attempts / len(evaluated) if evaluated else None,
        cost_usd=sum(r.cost_usd for r in rows), tokens=sum(r.tokens for r in rows),
        build_s=round(sum(r.build_s for r in rows), 1),
        n_reduced_precision=sum(1 for r in evaluated if r.reduced_precision),
        against={b: BaselineSummary(fast={p: fast_p(rows, p, b)[0] for p in FAST_P}, n=fast_p(rows, 0.0, b)[1],
                                    geomean_speedup=geomean_speedup(rows, b)) for b in BASELINES})


def campaign_report(store: Store, campaign_id: str) -> CampaignReport:
    """Everything the CLI table, the JSON and the figure show."""
    campaign = store.campaign(campaign_id)
    rows = problem_rows(store, campaign_id)
    return CampaignReport(campaign=campaign, problems=rows, summary=suite_summary(rows),
                          usage=campaign_usage(store, campaign_id, rows))


# --- text ------------------------------------------------------------------------------------------
def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def report_lines(report: CampaignReport) -> list[str]:
    c, s = report.campaign, report.summary
    lines = [f"campaign {c.id} ({c.status}): {c.suite}", ""]
    head = f"{'problem':<28} {'status':<11} {'eager us':>10} {'compile us':>10} {'seed us':>10} " \
           f"{'vendor us':>10} {'best child':>10} {'vs eager':>9} {'vs compile':>10} {'vs faster':>9} " \
           f"{'vs vendor':>9} {'tries':>5} " \
           f"{'cost $':>7}"
    lines += [head, "-" * len(head)]
    for r in report.problems:
        lines.append(f"{r.name[:28]:<28} {r.status:<11} {fmt_us(r.eager_us):>10} {fmt_us(r.compiled_us):>10} "
                     f"{fmt_us(r.seed_us):>10} {fmt_us(r.vendor_us):>10} {fmt_us(r.best_us):>10} "
                     f"{fmt_x(r.speedup_eager):>9} {fmt_x(r.speedup_compiled):>10} {fmt_x(r.speedup_faster):>9} "
                     f"{fmt_x(r.speedup_vendor):>9} "
                     f"{r.attempts:>5} {r.cost_usd:>7.2f}")
        losers = [name for name, x in (("PyTorch eager", r.speedup_eager), ("torch.compile", r.speedup_compiled),
                                       ("the vendor library", r.speedup_vendor)) if x and x < 1]
        if losers and times_rank(r.interpreted):
            lines.append(f"    LOSES: the best kernel is slower than {', '.join(losers)}")
        if r.library_us:
            lines.append(f"    best installed library: {r.library_label}, {fmt_us(r.library_us)} us; the best kernel "
                         f"is {fmt_x(r.speedup_library)} as fast" + ("" if r.speedup_library is None
                                                                    or r.speedup_library >= 1 else " (LOSES)"))
        if r.beats_all is not None:
            lines.append(f"    beats every baseline: {'yes' if r.beats_all else 'no'} "
                         f"(fastest baseline {fmt_us(r.fastest_us)} us, {fmt_x(r.speedup_fastest)})")
        if r.reduced_precision:
            lines.append(f"    best child: {precision_label(r.precision)}")
        if r.status in ("skipped", "failed") and r.reason:
            lines.append(f"    {r.reason[:150]}")
    lines += ["", "best child: the fastest correct kernel the scientist wrote, in us; the seed is its starting "
                  "point and not counted (as KernelBench counts), so it may be slower than the seed", FASTER_NOTE]
    if any(r.interpreted for r in report.problems):
        lines.append(f"(CPU interpreter: {CPU_NOTE}; no kernel is said to lose on them)")
    lines.append(f"{s.n_evaluated} of {s.n_problems} problems evaluated ({s.n_skipped} skipped); "
                 f"success rate {_pct(s.success_rate)}; {s.attempts} attempts; "
                 f"LLM cost ${s.cost_usd:.2f}; compilers ran {s.build_s:,.0f} s in the judges' workers")
    for baseline, label in (("eager", "PyTorch eager"), ("compiled", "torch.compile"), ("faster", "faster of two"),
                            ("vendor", "vendor lib"), ("library", "installed lib"), ("fastest", "fastest base")):
        against = s.against[baseline]
        fast = "  ".join(f"fast_{p:g} {_pct(against.fast[p])}" for p in FAST_P)
        lines.append(f"vs {label:<14} (n={against.n}): {fast}  geomean speedup {fmt_x(against.geomean_speedup)}")
    lines.append(beats_line(report.problems))
    if s.n_reduced_precision:
        lines.append(f"reduced precision: the best child of {s.n_reduced_precision} of {s.n_evaluated} problems "
                     f"({RULE.split(': ', 1)[1]})")
    lines += ["", *usage_lines(report.problems, report.usage)]
    return lines


def report_json(report: CampaignReport) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str)


# --- figure ----------------------------------------------------------------------------------------
# fast_p curves, each with its own dashes, so one that coincides with another stays visible over it
CURVES = (("eager", "-"), ("compiled", "--"), ("faster", "-."), ("fastest", ":"))
CURVE_NAMES = {**BASELINE_NAMES, "fastest": "the fastest baseline"}


def campaign_figure(report: CampaignReport, size=(10, 4.2), dpi: int = 100):
    """Left: each problem's speedup over eager, torch.compile and the faster of the two (log scale; a missing
    bar is a problem without a correct kernel or without that baseline; a baseline timed on no problem has
    no bars and is named as such; a reduced-precision best is hatched). Right: fast_p against p, the curve
    KernelBench plots; a curve that coincides with another is dashed over it and says so. Captioned with the
    device that judged the kernels, and on the CPU that its times are not performance."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1.6, 1])
    rows = [r for r in report.problems if not r.skipped]
    names = [r.name for r in rows]
    colours = {"eager": "#1565c0", "compiled": "#6a1b9a", "faster": "#2e7d32", "fastest": "#ad1457"}
    timed = [b for b in ("eager", "compiled", "faster") if any(speedup(r, b) for r in rows)]
    width = 0.8 / max(len(timed), 1)
    for k, baseline in enumerate(timed):
        values = [speedup(r, baseline) or 0.0 for r in rows]
        left.bar([i + (k - (len(timed) - 1) / 2) * width for i in range(len(rows))], values, width,
                 color=colours[baseline], hatch=[("//" if r.reduced_precision else "") for r in rows],
                 label=f"vs {BASELINE_NAMES[baseline]}")
    left.axhline(1.0, color="black", linewidth=0.8)
    left.set_yscale("log")
    left.set_xticks(range(len(rows)), names, rotation=30, ha="right", fontsize=8)
    left.set_ylabel("speedup of the best kernel")
    if timed:
        left.legend(fontsize=8)
    untimed = [BASELINE_NAMES[b] for b in ("eager", "compiled") if b not in timed]  # the faster needs both
    left.set_title(f"campaign {report.campaign.id}"
                   + (f" (no bars for {' or '.join(untimed)}: not timed beside a correct kernel)" if untimed else ""),
                   fontsize=9)
    ps = [i / 20 for i in range(0, 61)]
    drawn: dict[tuple, str] = {}
    for baseline, style in CURVES:
        curve = [fast_p(report.problems, p, baseline)[0] for p in ps]
        if all(v is None for v in curve):
            continue
        values = tuple(v or 0.0 for v in curve)
        label = f"vs {CURVE_NAMES[baseline]}"
        same = drawn.get(values)
        drawn.setdefault(values, label)
        right.step(ps, values, where="post", color=colours[baseline], linestyle=style, linewidth=2.0,
                   label=f"{label} (same as {same})" if same else label)
    right.set_xlabel("p (speedup threshold)")
    right.set_ylabel("fast_p")
    right.set_ylim(0, 1.05)
    if drawn:
        right.legend(fontsize=8)
    devices = sorted({r.device for r in rows if r.device})
    caption = f"judged on {', '.join(devices) or 'an unrecorded device'}"
    if any(r.interpreted for r in rows):
        caption += f"\nCPU interpreter: not performance ({CPU_NOTE})"
    fig.suptitle(caption, fontsize=9)
    return fig
