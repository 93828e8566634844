"""Compact text of what a profiler sees, for the scientist's prompts and for `kscience show`.

`render_profile` turns what was seen of a candidate (record.seen.Seen: compile facts, an Nsight Compute
profile, the speed of light, time per kernel and per call) into a few lines; `render_headroom` gives the
headroom alone (for the designer and the selector). Absent facts are left out, never guessed: under the CPU
interpreter there are none, and the text says so.
"""

from __future__ import annotations

from kscience.evaluate.profile.compile_facts import KernelFacts
from kscience.evaluate.profile.ncu import NcuProfile
from kscience.evaluate.result import CallBreakdown, clock_counts
from kscience.problems import shape_label
from kscience.problems.roofline import ShapeSol, summary
from kscience.record.metrics import KernelSplit
from kscience.record.seen import Seen, ShapeCall
from kscience.record.text import kernel_split_text, name_text
from kscience.scientist.quoting import quote

MAX_KERNEL_LINES = 6  # distinct kernels shown; each kernel's compiled specialisations share one line
MAX_SPLIT_SHAPES = 4  # timed shapes whose per-kernel split is shown
MAX_CALL_SHAPES = 4  # timed shapes whose call breakdown is shown
OUTPUT_CHARS = 4000  # what the kernel printed, whole lines up to this much
BUILT_BY = {"triton": "Triton", "load_inline": "load_inline", "build": "built into KSCIENCE_BUILD_DIR",
            "ptxas": "ptxas -v report"}


def _pct(x: float | None) -> str:
    return f"{x:.0f}%" if x is not None else "?"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} B"


def kernel_line(f: KernelFacts) -> str:
    parts = []
    if f.num_warps is not None:
        parts.append(f"{f.num_warps} warps" + (f", {f.num_stages} stages" if f.num_stages is not None else ""))
    if f.registers is not None:
        parts.append(f"{f.registers} registers/thread")
    if f.spills is not None:
        parts.append("no spills" if f.spills == 0 else f"SPILLS {f.spills} words to local memory")
    if f.local_bytes:
        parts.append(f"{_size(f.local_bytes)} local memory per thread")
    shared = f.shared_bytes if f.shared_bytes is not None else f.static_shared_bytes
    if shared is not None:
        parts.append(f"{_size(shared)} shared")
    if f.tensor_core is not None:
        parts.append("tensor cores: " + (f"yes ({', '.join(f.tensor_instructions[:3])})" if f.tensor_core else "NO"))
    where = BUILT_BY.get(f.source, f.source) + (f", {f.arch}" if f.arch else "")
    return f"- {name_text(f.name, 120)} ({where}): " + ("; ".join(parts) or "no compiled facts")


def _spread(values: list, fmt=str) -> str:
    """'8' when every specialisation agrees, '4-8' (numbers) or '4/8' otherwise."""
    seen = sorted(set(values))
    if len(seen) == 1:
        return fmt(seen[0])
    return f"{fmt(seen[0])}-{fmt(seen[-1])}" if all(isinstance(v, int) for v in seen) else "/".join(map(fmt, seen))


def kernel_group_line(group: list[KernelFacts]) -> str:
    """One line for one kernel however many specialisations (constexpr values, autotuned configs) it was
    compiled into: identical ones are counted, differing facts given as their range."""
    if len({kernel_line(f) for f in group}) == 1:
        line = kernel_line(group[0])
        return line if len(group) == 1 else f"{line} [{len(group)} identical specialisations]"
    f0, parts = group[0], []
    warps = [f.num_warps for f in group if f.num_warps is not None]
    stages = [f.num_stages for f in group if f.num_stages is not None]
    if warps:
        parts.append(f"{_spread(warps)} warps" + (f", {_spread(stages)} stages" if stages else ""))
    regs = [f.registers for f in group if f.registers is not None]
    if regs:
        parts.append(f"{_spread(regs)} registers/thread")
    spills = [f.spills for f in group if f.spills is not None]
    if spills:
        worst = max(spills)
        parts.append("no spills" if worst == 0 else f"SPILLS up to {worst} words to local memory "
                                                    f"({sum(x > 0 for x in spills)} of {len(spills)})")
    shared = [f.shared_bytes if f.shared_bytes is not None else f.static_shared_bytes for f in group]
    shared = [x for x in shared if x is not None]
    if shared:
        parts.append(f"{_spread(shared, _size)} shared")
    tensor = [f.tensor_core for f in group if f.tensor_core is not None]
    if tensor:
        ops = sorted({op for f in group for op in f.tensor_instructions})
        parts.append("tensor cores: " + ("NO" if not any(tensor) else
                                         f"{'yes' if all(tensor) else f'in {sum(tensor)} of {len(tensor)}'}"
                                         f" ({', '.join(ops[:3])})"))
    where = BUILT_BY.get(f0.source, f0.source) + (f", {f0.arch}" if f0.arch else "")
    return f"- {name_text(f0.name, 120)} ({where}), {len(group)} specialisations: " + "; ".join(parts)


def kernel_lines(facts: list[KernelFacts]) -> list[str]:
    """One line per distinct kernel, in the order first compiled."""
    groups: dict[tuple, list[KernelFacts]] = {}
    for f in facts:
        groups.setdefault((f.name, f.source, f.arch), []).append(f)
    lines = [kernel_group_line(g) for g in groups.values()]
    if len(lines) > MAX_KERNEL_LINES:
        lines = lines[:MAX_KERNEL_LINES] + [f"- ... and {len(lines) - MAX_KERNEL_LINES} more kernel(s)"]
    return lines


def ncu_lines(p: NcuProfile) -> list[str]:
    counts: dict[str, int] = {}
    for k in p.kernels:
        counts[k.name] = counts.get(k.name, 0) + 1
    launched = ", ".join(f"{name_text(name)} x{n}" for name, n in counts.items())
    lines = [f"- Nsight Compute on {shape_label(p.shape)}: {len(p.kernels)} kernel launch(es) per call ({launched})"
             + (f", {p.gpu_time_us:.1f} us on the GPU at base clocks" if p.gpu_time_us else "")
             + (f"; profiling took {p.profile_s:.1f} s, outside any timing" if p.profile_s else "")]
    mem = []
    if p.dram_bandwidth is not None:
        mem.append(f"DRAM {p.dram_bandwidth / 1e9:.0f} GB/s ({_pct(p.dram_pct)} of peak)")
    elif p.dram_pct is not None:
        mem.append(f"DRAM {_pct(p.dram_pct)} of peak")
    if p.l2_hit_pct is not None:
        mem.append(f"L2 hit rate {_pct(p.l2_hit_pct)}")
    compute = [f"{label} {_pct(v)}" for label, v in (("SM throughput", p.sm_pct), ("tensor pipe", p.tensor_pipe_pct),
                                                      ("achieved occupancy", p.occupancy_pct)) if v is not None]
    if mem or compute:
        lines.append("- " + "; ".join(mem + compute))
    if p.stalls:
        lines.append("- top warp stalls: " + ", ".join(f"{r} {v:g}" for r, v in p.stalls) + f" ({p.stall_unit})")
    return lines


def split_clause(profile: Seen | None) -> str:
    """The per-kernel split of a kernel's last timed shape in a clause a finding keeps ("" with one
    kernel or none): which launch the time went to is what the next experiment needs."""
    last = profile.kernels[-1] if profile and profile.kernels else None
    if last is None or len(last.kernels) < 2:
        return ""
    return f" (per kernel on {last.shape}: {kernel_split_text(last.kernels)})"


def kernel_time_lines(by_shape: list[KernelSplit], profiler: str = "") -> list[str]:
    """Time per launched kernel and call, per timed shape, or the judge's note on why there is none,
    quoted: it can hold the profiler's error from the candidate's process."""
    if not by_shape:
        return [quote(profiler, "- time per launched kernel: none; the judge's note")] \
            if profiler.startswith("per-kernel") else []
    lines = [f"- time per launched kernel and call (profiled after the timed calls, {profiler or 'profiler'}; "
             "their sum can differ from the timed median):"]
    lines += [f"  {s.shape}: {kernel_split_text(s.kernels)}" for s in by_shape[:MAX_SPLIT_SHAPES]]
    if len(by_shape) > MAX_SPLIT_SHAPES:
        lines.append(f"  ... and {len(by_shape) - MAX_SPLIT_SHAPES} more shape(s)")
    return lines


def _bytes(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 1024:,.1f} KiB" if n >= 1024 else f"{n} B"


def call_text(call: CallBreakdown, interpreted: bool) -> str:
    """'profiled call 250.1 us = 95.0 us before the first kernel + 132.9 us in 2 launches + ...' for one
    shape's median profiled call (kernel_times.call_breakdown)."""
    work = "interpreted Triton launches" if interpreted else "kernels on the GPU"
    text = (f"profiled call {call.call_us:,.1f} us = {call.before_first_us:,.1f} us before the first "
            f"kernel + {call.kernels_us:,.1f} us in {call.launches} launch(es) ({work}) + "
            f"{call.gaps_us:,.1f} us of gaps between them + {call.after_last_us:,.1f} us after the last")
    if call.allocations is not None:
        text += (f"; inside the call {call.allocations} allocation(s) of {_bytes(call.allocated_bytes)}, "
                 f"{call.cuda_mallocs} of them new cudaMalloc")
    return text


def call_lines(calls: list[ShapeCall], interpreted: bool = False) -> list[str]:
    """What one timed call holds, per timed shape, next to its timed median, and the one line on what that
    median counts (result.clock_counts)."""
    if not calls:
        return []
    n = calls[0].call.calls
    lines = [f"- what a call holds (the median of {n} call(s) profiled after the timed calls, under a profiler "
             "that adds its own cost, so advice beside the timed median, never the score):"]
    for c in calls[:MAX_CALL_SHAPES]:
        timed = f"timed median {c.time_us:,.1f} us; " if c.time_us else ""
        lines.append(f"  {shape_label(c.shape)}: {timed}{call_text(c.call, interpreted)}")
    if len(calls) > MAX_CALL_SHAPES:
        lines.append(f"  ... and {len(calls) - MAX_CALL_SHAPES} more shape(s)")
    lines.append(f"  What the timed median counts: {clock_counts(interpreted)}.")
    return lines


def output_lines(output: str) -> list[str]:
    """The candidate's own stdout and stderr (candidate_output.digest), quoted as untrusted data."""
    if not output:
        return []
    return [quote(output, "- what the kernel printed (stdout/stderr, each distinct line once, warnings first)",
                  OUTPUT_CHARS)]


def render_headroom(sols: list[ShapeSol]) -> str:
    """One line: where the kernel is furthest from its roofline bound, and the median."""
    s = summary(sols)
    if s is None:
        return "Headroom: unknown (no roofline bound: CPU interpreter, unknown device or no timed shape)."
    return (f"Headroom: {s.worst:.0%} of the {s.worst_bound} bound on shape {shape_label(s.worst_shape)} "
            f"(up to {1 / s.worst:.1f}x faster possible there); median {s.median:.0%} of speed of light "
            f"over {s.n_shapes} shape(s).")


def render_profile(profile: Seen) -> str:
    """The block a prompt shows about one candidate."""
    lines = ["Profile of this kernel:"]
    if profile.compile_facts:
        lines += kernel_lines(profile.compile_facts)
    else:
        lines.append("- compile facts: none (no compiled GPU code: CPU interpreter or nothing compiled)")
    lines += kernel_time_lines(profile.kernels, profile.kernel_profiler)
    lines += call_lines(profile.calls, profile.interpreted)
    if profile.ncu is not None:
        lines += ncu_lines(profile.ncu)
    lines += output_lines(profile.output)
    if profile.flag:
        lines.append(f"- WARNING: {profile.flag}")
    if profile.sol:
        lines.append(render_headroom(profile.sol))
    return "\n".join(lines)
