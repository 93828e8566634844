"""The end-of-run table, as plain text lines: what `kscience run`, `kscience show` and a notebook's
text view all print, so a terminal and a notebook report the same numbers the same way.

One name per thing: "PyTorch eager" (`text.EAGER`) is the problem's eager PyTorch kernel the
run times as a baseline (stored as the candidate of kind "eager", its metrics under `eager_us`)."""

from __future__ import annotations

from kscience.evaluate.result import DeviceRecord
from kscience.record.liveness import display_status
from kscience.record.metrics import RunMetrics
from kscience.record.rows import LlmUsage, RunRow
from kscience.record.candidate import speedup
from kscience.problems.precision import RULE, label as precision_label
from kscience.record.text import EAGER, FASTER, fmt_busy, fmt_duration, fmt_us, fmt_x, plural
from kscience.record.text import kernel_split_text

CPU_NOTE = "CPU-interpreter timings check the machinery, not GPU performance"


def _rate(part: int, whole: int, noun: str) -> str:
    return f"{part} of {whole} {noun} ({100 * part / whole:.0f}%)" if whole else f"no {noun}"


def timing_text(device: DeviceRecord, label: str | None) -> str:
    """Where and how a run's times were taken: "CPU (cpu interpreter (judge's clock))" would nest,
    so the label follows a comma."""
    text = f"{device.name or 'unknown device'}, timed by {label or 'an unknown clock'}"
    return text + (f"; {CPU_NOTE}" if device.interpreted else "")


def llm_text(usage: LlmUsage) -> str:
    """Model calls, tokens and cost over every session of the run; the offline scientist's scripted
    answers are not model calls and spend no tokens."""
    offline = usage.offline_calls or 0
    if not usage.calls:
        return f"none: the offline scientist answered {plural(offline, 'prompt')}" if offline else "no model calls"
    text = (f"{plural(usage.calls, 'call')}, {usage.tokens:,} tokens, ${usage.cost_usd:.4f} "
            f"(all sessions)" + (f", {usage.unpriced} unpriced" if usage.unpriced else ""))
    return text + (f"; and {plural(offline, 'offline answer')}" if offline else "")


def budget_parts(config: dict, usage: LlmUsage, elapsed_s: float, session_s: float | None = None) -> list[str]:
    """Tokens, cost and time used, each against its limit where the run has one, each saying what it
    covers: tokens and cost add up over every session; the time limit is per session."""
    tokens = f"{usage.tokens:,} tokens" + (f" of {config['max_tokens']:,}" if config.get("max_tokens") else "")
    cost = f"${usage.cost_usd:.4f}" + (f" of ${config['max_cost_usd']:.2f}" if config.get("max_cost_usd") else "")
    if usage.unpriced:
        cost += f" ({plural(usage.unpriced, 'call')} unpriced)"
    if session_s is None:
        clock = f"{fmt_duration(elapsed_s)} since the run began"
    else:
        clock = f"{fmt_duration(session_s)} this session"
    if config.get("time_limit_s"):
        clock += f" (limit {fmt_duration(config['time_limit_s'])} per session)"
    return [f"{tokens}, all sessions", f"{cost}, all sessions", clock]


def summary_lines(row: RunRow, m: RunMetrics) -> list[str]:
    """Best vs seed vs the baselines, and the numbers a paper reports (`m`: Snapshot.metrics())."""
    seed, eager, compiled, best = m.seed_us, m.eager_us, m.compiled_us, m.best_us
    iterations = plural(m.iterations_done, "iteration")
    vs_eager = f"vs {EAGER}"
    lines = [f"run {row.id} ({row.problem}, {row.llm}, {row.strategy}): {display_status(row)} "
             f"after {iterations}",
             f"device: {timing_text(m.judged_on, m.timing_label)}", "",
             f"  {'':<20}{'geomean us':>16}{'vs seed':>10}{vs_eager:>18}"
             + (f"{'vs torch.compile':>18}" if compiled else "")]
    rows = [(EAGER, eager)] + ([("torch.compile", compiled)] if m.compiled_status else [])
    rows += [("vendor library", m.vendor_us)] if m.vendor_status else []
    rows += [("vendor call alone", m.vendor_alone_us)] if m.vendor_alone_status else []
    libraries = {f"installed lib {i + 1}": lib for i, lib in enumerate(m.libraries or [])}
    rows += [(name, lib.us) for name, lib in libraries.items()]
    keys = {EAGER: "eager", "torch.compile": "compiled", "vendor library": "vendor", "seed": "seed"}
    for name, us in (*rows, ("seed", seed), (f"best {m.best_id or ''}", best)):
        line = f"  {name:<20}{fmt_us(us):>16}{fmt_x(speedup(seed, us)):>10}{fmt_x(speedup(eager, us)):>18}"
        if compiled:
            line += f"{fmt_x(speedup(compiled, us)):>18}"
        elif name == "torch.compile":  # timed but not ok: say why there is no number
            line += f"  {m.compiled_status}" + (f" [{m.compiled_message[:160]}]"
                                                   if m.compiled_message else "")
        if name == "vendor library":
            line += f"  {m.vendor_label}" + (f" [{m.vendor_status}: {(m.vendor_message or '')[:160]}]"
                                                if us is None else "")
        if name == "vendor call alone":  # not a rival: its inputs come in the layout it reads
            line += f"  {m.vendor_alone_label}" + (
                f" [{m.vendor_alone_status}: {(m.vendor_alone_message or '')[:160]}]" if us is None else "")
        if name in libraries:  # what it is, with its version; where it has no time, why (not installed...)
            lib = libraries[name]
            line += f"  {lib.label}" + (f" [{lib.status}: {(lib.message or '')[:160]}]" if us is None else "")
        host = m.figure_hosts.of(keys.get(name) or ("best" if name.startswith("best") else ""))
        if len(m.hosts or []) > 1 and host:  # figures from several machines: say whose each is
            line += f"  on {host}"
        lines.append(line)
    lines += faster_lines(m)
    lines += verdict_lines(m)
    if m.seed_best_sessions_differ:
        lines.append(f"  note: the seed and the best were timed by different sessions of the run (a resume), under "
                     f"different machine load; `kscience retime {row.id}` judges them again side by side")
    uplift = m.uplift
    reached = (f"; the best was the {_ordinal(m.evaluated_to_best)} evaluated"
               if m.evaluated_to_best else "")
    lines += ["",
              f"  candidates evaluated   {m.n_candidates} ({m.n_ok} correct){reached}",
              f"  repair success         {_rate(m.repairs_succeeded, m.repairs_tried, 'broken kernels fixed')}",
              f"  edit-apply rate        {_rate(m.edits_applied, m.edits_total, 'edits applied')}",
              "  predicted vs measured  " + (f"{plural(len(uplift), 'plan')} measured, {m.uplift_in_range} inside "
                                             f"the predicted uplift range; mean error "
                                             f"{m.uplift_mean_abs_error_pct:.1f} percentage points"
                                             if uplift else "no plan measured"),
              *([f"  evaluator busy         {fmt_busy(m.busy_per_slot)} of the run's wall time"]
                if m.busy_per_slot else []),
              *([f"  judged on hosts        {', '.join(m.hosts)}: a new best and every composite were judged "
                 "again beside the best on one host"] if len(m.hosts or []) > 1 else []),
              f"  LLM                    {llm_text(m.llm)}"]
    return lines + precision_lines(m) + sol_lines(m)


def faster_lines(m: RunMetrics) -> list[str]:
    """The baseline that counts and the best kernel's speed-up over it; on a GPU, why it is not known. A CPU run
    never times torch.compile, and its table has no such row either."""
    if m.faster_us is None:
        if m.judged_on.interpreted is not False:
            return []
        why = "PyTorch eager has no time" if not m.eager_us else "torch.compile was not timed"
        return [f"  {FASTER}: unknown, {why}"]
    which = "torch.compile" if m.faster_us == m.compiled_us else EAGER
    return [f"  {FASTER}: {which}, {fmt_us(m.faster_us)} us; the best kernel is "
            f"{fmt_x(m.speedup_vs_faster)} as fast"]


def precision_lines(m: RunMetrics) -> list[str]:
    """The best kernel's precision against a float64 reference, and how many correct kernels computed far less
    precisely than the reference (kscience.problems.precision)."""
    lines = []
    if m.precision_best:
        lines.append(f"  precision (best)       {precision_label(m.precision_best)}")
    if m.n_reduced_precision:
        lines.append(f"  reduced precision      {plural(m.n_reduced_precision, 'correct kernel')}: "
                     f"{RULE.split(': ', 1)[1]}")
    return lines


def times_rank(interpreted: bool | None) -> bool:
    """Whether times judged on a device (`interpreted`: whether it was the CPU interpreter, None where unknown) may
    rank kernels against the baselines: the CPU interpreter's check the machinery only, so neither `show` nor a
    campaign report says a kernel LOSES on them."""
    return not interpreted


def verdict_lines(m: RunMetrics) -> list[str]:
    """Plainly, whether a user would rather pick a baseline than the best kernel; and what composition did."""
    best, lines = m.best_us, []
    if best is not None and times_rank(m.judged_on.interpreted):
        rivals = [(name, us) for name, us in ((EAGER, m.eager_us), ("torch.compile", m.compiled_us),
                                              (m.vendor_label or "the vendor library", m.vendor_us),
                                              *((lib.label, lib.us) for lib in m.libraries or []))
                  if us is not None and us < best]
        for name, us in rivals:
            lines.append(f"  LOSES: the best kernel ({fmt_us(best)} us) is slower than {name} ({fmt_us(us)} us): "
                         f"a user would pick {name}")
    if m.n_composites:
        what = "the best kernel is a per-shape composite" if m.best_kind == "composite" else \
            "none is the best kernel"
        lines.append(f"  composition: {plural(m.n_composites, 'composite')} judged; {what}")
    return lines


def sol_lines(m: RunMetrics) -> list[str]:
    """Speed of light of the best kernel per shape, its time per launched kernel and what it printed, and
    what profiling cost."""
    lines = []
    if m.sol_best:
        lines.append(f"  speed of light (best)  worst {m.sol_worst:.0%}, median {m.sol_median:.0%} of the "
                     f"roofline bound over {len(m.sol_best)} shape(s)")
        lines += [f"    {s.shape:<30}{s.fraction:>6.0%} of the {s.bound} bound" for s in m.sol_best]
    if m.kernels_best:
        lines.append("  kernels (best)         time per launched kernel and call, after the timed calls")
        lines += [f"    {s.shape:<30}{kernel_split_text(s.kernels)}" for s in m.kernels_best]
    if m.output_best:
        lines.append("  printed (best)         " + m.output_best.splitlines()[0][:120]
                     + (f" (+{len(m.output_best.splitlines()) - 1} more line(s))"
                        if len(m.output_best.splitlines()) > 1 else ""))
    if m.n_profiled:
        share = f", {m.profile_share:.1%} of slot time" if m.profile_share is not None else ""
        lines.append(f"  profiled (ncu)         {m.n_profiled} candidate(s), {m.profile_s_total:.1f} s in all, "
                     f"{m.profile_s_total / m.n_profiled:.1f} s each{share}, outside any timing")
    if m.n_flagged:
        lines.append(f"  NOT DOING THE WORK     {m.n_flagged} candidate(s) flagged by their counters")
    return lines


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
