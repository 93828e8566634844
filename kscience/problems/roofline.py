"""Speed of light: how close a measured time is to the roofline bound of its shape.

The bound is the physical floor the judge already enforces (`Device.floor_seconds`: the larger of
bytes / peak bandwidth and FLOPs / peak rate, from the problem's `flops` and `bytes_moved` per
shape and the datasheet peaks in `kscience.device`). Per shape:

* compute fraction = (FLOPs / time) / peak rate of the problem's precision
* memory fraction  = (bytes / time) / peak bandwidth
* fraction (speed of light) = floor / time = the larger of the two, in (0, 1] for honest times.

Following the speed-of-light guidance of kernel-agent studies (and Dr. Kernel's rejection of
"lazy" kernels), `not_doing_the_work` compares what the hardware counters saw with what the
problem needs: a kernel that moves or computes far less cannot be computing the answer in
the intended way (it may be reading a cached answer, or skipping work the checks missed).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from kscience.device import Peaks, peaks_for
from kscience.problems import Problem, shape_label

LAZY_FRACTION = 0.25  # counters below a quarter of the work the problem needs: not doing the work


@dataclass
class ShapeSol:
    """The roofline position of one timed shape: its measured time against the floor its work sets."""

    shape: dict
    time_us: float
    floor_us: float
    compute_fraction: float | None  # None: the problem declares no FLOPs
    memory_fraction: float | None  # None: the problem declares no bytes
    bound: str  # "compute" or "memory": the larger of the two bounds for this shape

    @property
    def fraction(self) -> float:
        """Speed of light reached: floor / time."""
        return self.floor_us / self.time_us

    def to_dict(self) -> dict:
        return dict(asdict(self), fraction=self.fraction)

    @classmethod
    def from_dict(cls, d: dict) -> "ShapeSol":
        """From `to_dict()` (as stored), the derived `fraction` dropped."""
        return cls(**{k: v for k, v in d.items() if k != "fraction"})


def shape_sol(shape: dict, time_us: float, flops: float, nbytes: float, peaks: Peaks,
              precision: str) -> ShapeSol | None:
    """The roofline position of one timed shape; None where the problem declares no work."""
    if not time_us or time_us <= 0 or (not flops and not nbytes):
        return None
    rate = peaks.rates.get(precision, max(peaks.rates.values()))
    seconds = time_us * 1e-6
    compute = flops / seconds / rate if flops else None
    memory = nbytes / seconds / peaks.bandwidth if nbytes else None
    compute_floor, memory_floor = flops / rate * 1e6, nbytes / peaks.bandwidth * 1e6
    return ShapeSol(shape=dict(shape), time_us=time_us, floor_us=max(compute_floor, memory_floor),
                    compute_fraction=compute, memory_fraction=memory,
                    bound="compute" if compute_floor >= memory_floor else "memory")


def result_sol(problem: Problem, result: dict, peaks: Peaks | None = None) -> list[ShapeSol]:
    """Per timed benchmark shape of an evaluation (EvalResult.to_dict()), its speed of light.
    Peaks default to those of the device named in the result; [] under the interpreter or on an
    unknown device, where no bound exists."""
    device = result.get("device") or {}
    if device.get("interpreted"):
        return []
    peaks = peaks or peaks_for(str(device.get("name", "")))
    if peaks is None:
        return []
    out = []
    for s in result.get("shapes", []):
        if s.get("phase") == "benchmark" and s.get("time_us"):
            sol = shape_sol(s["shape"], s["time_us"], problem.flops(**s["shape"]),
                            problem.bytes_moved(**s["shape"]), peaks, problem.precision)
            if sol is not None:
                out.append(sol)
    return out


@dataclass(frozen=True)
class SolSummary:
    """Speed of light over a candidate's timed shapes: the worst and median fraction of the roofline bound,
    and the worst shape (the one with the most headroom) with its bound."""

    worst: float
    median: float
    worst_shape: dict
    worst_bound: str  # "compute" or "memory"
    n_shapes: int


def summary(sols: list[ShapeSol]) -> SolSummary | None:
    """Worst and median speed of light over shapes, and the shape with the most headroom."""
    if not sols:
        return None
    worst = min(sols, key=lambda s: s.fraction)
    return SolSummary(worst=worst.fraction, median=statistics.median(s.fraction for s in sols),
                      worst_shape=worst.shape, worst_bound=worst.bound, n_shapes=len(sols))


def stop_at_sol(best: list[ShapeSol], target: float | None) -> bool:
    """Whether a run can stop: its best candidate reaches `target` of the roofline bound (0 < target
    <= 1, e.g. 0.8 = 80% of speed of light) on every benchmark shape. Never without a bound."""
    if target is None or not best:
        return False
    if not 0 < target <= 1:
        raise ValueError(f"stop_at_sol must be a fraction in (0, 1], not {target}")
    return all(s.fraction >= target for s in best)


def not_doing_the_work(problem: Problem, shape: dict, dram_bytes: float | None,
                       fp32_flops: float | None) -> str | None:
    """A one-line flag when the counters show far fewer bytes or FLOPs than the problem needs.

    Bytes: Nsight Compute flushes the caches before each profiled kernel, so the inputs must come
    from DRAM; writes may stay in L2, hence the wide margin. FLOPs are compared only for fp32
    problems, where the counted CUDA-core fadd/fmul/ffma are the work (tensor-core work is not in them).
    """
    need_bytes, need_flops = problem.bytes_moved(**shape), problem.flops(**shape)
    where = shape_label(shape)
    if dram_bytes is not None and need_bytes and dram_bytes < LAZY_FRACTION * need_bytes:
        return (f"not doing the work: on {where} the kernels moved {dram_bytes:.3g} bytes from DRAM, "
                f"{dram_bytes / need_bytes:.0%} of the {need_bytes:.3g} the problem needs")
    if fp32_flops is not None and need_flops and problem.precision == "fp32" and fp32_flops < LAZY_FRACTION * need_flops:
        return (f"not doing the work: on {where} the kernels executed {fp32_flops:.3g} FLOPs, "
                f"{fp32_flops / need_flops:.0%} of the {need_flops:.3g} the problem needs")
    return None
