"""Numbers and names as a reader sees them, the same in the CLI, the dashboard, the summary, the
report and retime: times (one decimal, thousands separated: 1,144.6 us), speedups (three significant
figures: 2.91x, 0.0123x), busy fractions, durations, plurals, a candidate's kind."""

from __future__ import annotations

import math
import re

from kscience.evaluate.result import KernelTime
from kscience.problems import shape_label
from kscience.problems.roofline import SolSummary


US = " us"  # the unit every time carries, on a terminal and in a notebook alike
MAX_SPLIT_KERNELS = 5  # kernels named per shape, the costliest; the rest are summed


def fmt_us(us: float | None, unit: str = "") -> str:
    """Microseconds as every view shows them: 1,144.6 (with `unit` appended), or "-" for no time."""
    return f"{us:,.1f}{unit}" if us else "-"


def fmt_timing(median_us: float | None, spread_us: float | None, n: int) -> str:
    """One shape's timing, each number named: "median 1,144.6 us, sd 3.0 us, n=20 calls"."""
    spread = f", sd {fmt_us(spread_us, ' us')}" if spread_us else ""
    return f"median {fmt_us(median_us, ' us')}{spread}, n={n} {'call' if n == 1 else 'calls'}"


def fmt_x(ratio: float | None) -> str:
    """A speedup in plain digits, never scientific notation, at most 8 characters for any ratio a
    run can show: 1.23x, 12.3x, 1,690x, 0.0123x; "-" for none."""
    if not ratio:
        return "-"
    if ratio >= 99.95:
        return f"{ratio:,.0f}x"
    if ratio >= 9.995:
        return f"{ratio:.1f}x"
    if ratio >= 0.9995:
        return f"{ratio:.2f}x"
    # Slower than the baseline: three significant digits after the leading zeros, down to 1e-6.
    decimals = min(6, 2 - math.floor(math.log10(ratio)))
    return f"{ratio:.{decimals}f}x" if ratio >= 1e-6 else "<0.000001x"


def fmt_pct(pct: float) -> str:
    return f"{pct:+.1f}%"


def fmt_busy(fractions: list[float]) -> str:
    """Busy fraction per evaluation slot, e.g. "slot 0 93%, slot 1 88%" (a lone slot: "93%")."""
    if not fractions:
        return "not measured"
    if len(fractions) == 1:
        return f"{fractions[0]:.0%}"
    return ", ".join(f"slot {i} {f:.0%}" for i, f in enumerate(fractions))


def fmt_sol(summary: SolSummary | None) -> str:
    """A speed-of-light summary (Snapshot.sol_summary) as one short phrase."""
    if summary is None:
        return "no roofline bound"
    return (f"worst {summary.worst:.0%} ({shape_label(summary.worst_shape)}, {summary.worst_bound} bound), "
            f"median {summary.median:.0%}")


def fmt_duration(seconds: float) -> str:
    """Whole seconds, minutes or hours: 45s, 3m09s, 1h05m."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def fmt_seconds(seconds: float) -> str:
    """A short wall time to a tenth of a second (4.0s), a longer one as `fmt_duration` says it."""
    return f"{seconds:.1f}s" if seconds < 60 else fmt_duration(seconds)


def plural(n: int, noun: str, many: str | None = None) -> str:
    """1 shape, 3 shapes, 1,024 shapes."""
    return f"{n:,} {noun if n == 1 else many or noun + 's'}"


# One name for one thing in whatever a user reads: the problem's eager PyTorch kernel, timed as a
# baseline, is stored as kind "eager" (older runs: "reference", read back as "eager") and shown as "PyTorch eager".
EAGER = "PyTorch eager"
# The baseline that counts (record.candidate.faster_of_eager_and_compile), in full and as a column heads it.
FASTER = "the faster of PyTorch eager and torch.compile"
FASTER_SHORT = "faster"
FASTER_NOTE = (f"{FASTER_SHORT}: {FASTER}, the baseline papers now report against (KernelBench v3, Helion); "
               "PyTorch eager alone where torch.compile was judged and failed")


def kind_text(kind: str) -> str:
    """A candidate's kind as a reader sees it: seed, child, repair, PyTorch eager, compiled."""
    return EAGER if kind == "eager" else kind


# Why the selector chose a plan, as stored (kscience.scientist.plans), in words a reader follows.
_WHY_CHOSEN = {"most innovative": "the most novel idea", "highest max": "the largest predicted gain",
               "highest min": "the safest predicted gain"}  # kscience.scientist.plans's rules, in plain words


def why_chosen_text(why: str) -> str:
    return _WHY_CHOSEN.get(why, why)


def name_text(name: str, limit: int = 60) -> str:
    """A kernel's name (the candidate chose it) as one printable run of at most `limit` characters."""
    return re.sub(r"[^\x21-\x7e]+", " ", str(name)).strip()[:limit] or "?"


def kernel_split_text(kernels: list[KernelTime]) -> str:
    """'cast_kernel x1 12.0 us (20%), gemm_kernel x1 48.0 us (80%)' for one shape's launched kernels."""
    total = sum(k.us for k in kernels) or 1.0
    parts = [f"{name_text(k.name)} x{k.launches:g} {k.us:.1f} us ({k.us / total:.0%})"
             for k in kernels[:MAX_SPLIT_KERNELS]]
    rest = kernels[MAX_SPLIT_KERNELS:]
    if rest:
        us = sum(k.us for k in rest)
        parts.append(f"{len(rest)} more kernel(s) {us:.1f} us ({us / total:.0%})")
    return ", ".join(parts)
