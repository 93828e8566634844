"""The end-of-run table, as plain text lines: what `kscience run`, `kscience show` and a notebook's
text view all print, so a terminal and a notebook report the same numbers the same way."""

from __future__ import annotations

from kscience.liveness import display_status
from kscience.snapshot import fmt_us, fmt_x, speedup


def _rate(part: int, whole: int, noun: str) -> str:
    return f"{part} of {whole} {noun} ({100 * part / whole:.0f}%)" if whole else f"no {noun}"


def summary_lines(row: dict, m: dict) -> list[str]:
    """Best vs seed vs the baselines, and the numbers a paper reports (`m`: Snapshot.metrics())."""
    device = (m.get("device") or {}).get("name", "unknown device")
    label = m.get("timing_label") or "unknown timing"
    cpu_note = ("; CPU-interpreter timings check the machinery, not GPU performance"
                if (m.get("device") or {}).get("interpreted") else "")
    seed, ref, compiled, best = m["seed_us"], m["reference_us"], m["compiled_us"], m["best_us"]
    lines = [f"run {row['id']} ({row['problem']}, {row['llm']}, {row['strategy']}): {display_status(row)} "
             f"after {m['iterations_done']} iteration(s)",
             f"device: {device}, {label}{cpu_note}", "",
             f"  {'':<20}{'geomean us':>16}{'vs seed':>10}{'vs reference':>14}"
             + (f"{'vs torch.compile':>18}" if compiled else "")]
    rows = [("reference", ref)] + ([("torch.compile", compiled)] if m["compiled_status"] else [])
    for name, us in (*rows, ("seed", seed), (f"best {m['best_id'] or ''}", best)):
        line = f"  {name:<20}{fmt_us(us):>16}{fmt_x(speedup(seed, us)):>10}{fmt_x(speedup(ref, us)):>14}"
        if compiled:
            line += f"{fmt_x(speedup(compiled, us)):>18}"
        elif name == "torch.compile":  # timed but not ok: say why there is no number
            line += f"  {m['compiled_status']}"
        lines.append(line)
    llm, uplift = m["llm"], m["uplift"]
    lines += ["",
              f"  candidates evaluated   {m['n_candidates']} ({m['n_ok']} correct)"
              + (f"; best reached after {m['evaluated_to_best']}" if m["evaluated_to_best"] else ""),
              f"  repair success         {_rate(m['repairs_succeeded'], m['repairs_tried'], 'broken kernels fixed')}",
              f"  edit-apply rate        {_rate(m['edits_applied'], m['edits_total'], 'edits applied')}",
              "  predicted vs measured  " + (f"{len(uplift)} plan(s) measured, {m['uplift_in_range']} inside the "
                                             f"predicted range, mean error {m['uplift_mean_abs_error_pct']:.1f} points"
                                             if uplift else "no plan measured"),
              f"  LLM                    {llm['calls']} calls, {llm['tokens']:,} tokens, ${llm['cost_usd']:.4f}"
              + (f" ({llm['unpriced']} unpriced)" if llm["unpriced"] else "")]
    return lines + sol_lines(m)


def sol_lines(m: dict) -> list[str]:
    """Speed of light of the best kernel per shape, and what profiling cost; nothing without a bound."""
    lines = []
    if m.get("sol_best"):
        lines.append(f"  speed of light (best)  worst {m['sol_worst']:.0%}, median {m['sol_median']:.0%} of the "
                     f"roofline bound over {len(m['sol_best'])} shape(s)")
        lines += [f"    {s['shape']:<30}{s['fraction']:>6.0%} of the {s['bound']} bound" for s in m["sol_best"]]
    if m.get("n_profiled"):
        lines.append(f"  profiled (ncu)         {m['n_profiled']} candidate(s), {m['profile_s_total']:.1f} s in all, "
                     f"{m['profile_s_total'] / m['n_profiled']:.1f} s each, outside any timing")
    if m.get("n_flagged"):
        lines.append(f"  NOT DOING THE WORK     {m['n_flagged']} candidate(s) flagged by their counters")
    return lines
