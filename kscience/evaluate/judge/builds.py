"""Whether the worker is building, as the judge sees it from outside (the trusted side).

Building is not running: a cold `load_inline` of torch's headers takes 60-90 s on an H200 host, an
nvcc build loaded through ctypes about as long, while a step limit derived from a seed of a few
seconds is 60 s. So a step whose limit runs out while a compiler runs in the worker's process tree
goes on, up to the build limit counted from the step's start (`result.BUILD_LIMIT_S`). Every build
path the candidate has ends in a compiler process the judge can see in /proc: torch's
`cpp_extension` runs ninja, nvcc and c++; a build through `subprocess` runs nvcc; Triton runs ptxas
for each kernel it compiles. The judge reads the processes' names itself, so the candidate can win
nothing but time it could also have spent building: a process it names `nvcc` that never ends costs
it at most the build limit.

The looks start once a step has waited `QUIET_S` (timed calls answer in milliseconds and are never
looked at) and repeat every `LOOK_S`; the seconds between looks that found a compiler are the
evaluation's `build_s`.
"""

from __future__ import annotations


# Process names (as /proc/PID/comm gives them, at most 15 characters) of the compilers and build tools
# the candidate's build paths run: NVIDIA's toolchain, ninja, the GNU and LLVM drivers, compilers and
# linkers, and ROCm's hipcc.
COMPILERS = frozenset({
    "nvcc", "cicc", "ptxas", "nvlink", "fatbinary", "cudafe++", "nvdisasm", "cuobjdump",
    "ninja", "make", "cmake",
    "cc", "c++", "gcc", "g++", "cc1", "cc1plus", "collect2", "lto-wrapper", "ld", "ld.bfd", "ld.gold", "as",
    "clang", "clang++", "ld.lld", "lld",
    "hipcc", "hipcc.bin", "amdclang", "amdclang++",
})
QUIET_S = 1.0  # a step is looked at once it has waited this long
LOOK_S = 0.25  # and then this often
RECENT_S = 1.0  # a compiler seen this recently still counts as building (Triton compiles one kernel at a time)


def compiler_names(pids) -> set[str]:
    """The names of the compilers among `pids`."""
    names = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name in COMPILERS:
            names.add(name)
    return names


class Builds:
    """The compilers seen in one evaluation's worker. `pids()` lists the worker's processes."""

    def __init__(self, pids, limit_s: float):
        self.pids, self.limit_s = pids, limit_s
        self.seconds = 0.0  # of the whole evaluation: between looks that found a compiler
        self.step_seconds = 0.0  # the same, in the current step
        self.seen: set[str] = set()  # which compilers
        self.step_start = self.last_look = self.last_seen = -float("inf")

    def step(self, now: float) -> None:
        """A new step (one command and its replies) starts."""
        self.step_start, self.last_look, self.step_seconds = now, now, 0.0

    def building(self, now: float, due: bool = False) -> bool:
        """Whether a compiler runs in the worker now, or did a moment ago; looks at most every LOOK_S,
        and at once when the step is `due` (its limit ran out)."""
        if now - self.step_start >= QUIET_S and (due or now - self.last_look >= LOOK_S):
            names = compiler_names(self.pids())
            if names:
                took = now - max(self.last_look, self.step_start + QUIET_S)
                self.seconds += took
                self.step_seconds += took
                self.seen |= names
                self.last_seen = now
            self.last_look = now
        return now - self.last_seen <= RECENT_S

    def step_end(self, limit_end: float, now: float) -> float:
        """When the current step runs out: `limit_end` (its limit) moved on by the seconds a compiler ran
        in the worker during it, and kept ahead of the clock while one runs, until the build limit is spent."""
        end = limit_end + min(self.step_seconds, self.limit_s)
        building = self.building(now, due=now >= end)
        end = limit_end + min(self.step_seconds, self.limit_s)
        if building and self.step_seconds < self.limit_s:
            end = max(end, now + 2 * LOOK_S)
        return end

    def ran_out(self, what: str) -> str | None:
        """Where the build limit is what ran out of the current step, the verdict's message; else None."""
        if self.step_seconds < self.limit_s:
            return None
        return (f"timed out: the {self.limit_s:.3g} s build limit ran out while {what}, with "
                f"{', '.join(sorted(self.seen))} still running in the worker (--build-limit raises it)")
