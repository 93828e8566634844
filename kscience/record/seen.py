"""What the scientist reads of a candidate's profile: the stored profile (compile facts, Nsight Compute
counters, speed of light per shape, the 'not doing the work' flag) with what the evaluation itself brought
back (time per launched kernel and what one profiled call held, per timed shape, and the kernel's own
output). The run builds it (`Seen.of`) from the store's ProfileRow and the candidate's EvalResult; the
scientist's prompts render it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kscience.evaluate.profile.compile_facts import KernelFacts
from kscience.evaluate.profile.ncu import NcuProfile
from kscience.evaluate.result import CallBreakdown, EvalResult
from kscience.problems import shape_label
from kscience.problems.roofline import ShapeSol
from kscience.record.metrics import KernelSplit
from kscience.record.rows import ProfileRow


@dataclass(frozen=True)
class ShapeCall:
    """What the median profiled call of one timed shape held, beside that shape's timed median."""

    shape: dict
    time_us: float | None
    call: CallBreakdown


@dataclass(frozen=True)
class Seen:
    """A candidate's profile as the scientist reads it; fields left at their defaults were not seen."""

    compile_facts: list[KernelFacts] = field(default_factory=list)
    ncu: NcuProfile | None = None
    sol: list[ShapeSol] = field(default_factory=list)
    flag: str | None = None
    kernels: list[KernelSplit] = field(default_factory=list)
    kernel_profiler: str = ""  # what measured `kernels`, or the judge's note on why there are none
    output: str = ""  # the candidate's stdout and stderr (candidate_output.digest)
    calls: list[ShapeCall] = field(default_factory=list)
    interpreted: bool = False  # `calls` were profiled under the CPU interpreter

    @property
    def anything(self) -> bool:
        """Whether a prompt has anything of this profile to show."""
        return any((self.compile_facts, self.ncu, self.sol, self.flag, self.kernels, self.kernel_profiler,
                    self.output, self.calls))

    def supplies(self, measure: str) -> bool:
        """Whether the measurement a plan asked for (kscience.scientist.measurements.ON_REQUEST) came back."""
        return measure == "ncu" and self.ncu is not None

    @classmethod
    def of(cls, profile: ProfileRow | None, result: EvalResult | None) -> "Seen | None":
        """A stored profile with what the evaluation brought back: time per launched kernel on each timed
        shape (and what measured it), what its median profiled call held (with whether it was judged under
        the interpreter) and the candidate's own output; None with neither."""
        shapes = result.shapes if result else []
        kernels = [KernelSplit(shape=shape_label(s.shape), kernels=s.kernel_times) for s in shapes if s.kernels]
        calls = [ShapeCall(shape=s.shape, time_us=s.time_us, call=s.breakdown) for s in shapes if s.call]
        brought = dict(kernels=kernels, kernel_profiler=result.kernel_profiler if result else "",
                       output=result.output if result else "", calls=calls,
                       interpreted=bool(calls) and bool(result.device.get("interpreted")))
        if profile is None and not any(brought.values()):
            return None
        stored = {} if profile is None else dict(
            compile_facts=[KernelFacts(**f) for f in profile.compile_facts or []],
            ncu=NcuProfile.from_dict(profile.ncu) if profile.ncu else None,
            sol=[ShapeSol.from_dict(s) for s in profile.sol or []], flag=profile.flag)
        return cls(**stored, **brought)
