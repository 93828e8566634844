"""The rules a kernel is judged by, as every designer, writer and repair prompt states them: the build
limit and the step limit, the build paths that work in the judge's worker, the precision policy and what
state may persist across calls.

They are filled from the settings the judge itself enforces (the run's `--build-limit`, its
`--eval-timeout` or the limit derived from the seed, the judge's own phase limits, the folder the worker
keeps a candidate's own builds in, the run's `--precision` as kscience.problems.precision states it), so the
prompt and the judge cannot disagree. The run fills a `Rules` from its judging (kscience.run.judging).
"""

from __future__ import annotations

from dataclasses import dataclass

from kscience.evaluate.judge.session import HARNESS_STEPS, LIMITS
from kscience.evaluate.result import BUILD_LIMIT_S
from kscience.evaluate.sandbox.compile_cache import BUILD_DIR_VAR
from kscience.problems import Problem
from kscience.problems.precision import DEFAULT_POLICY, policy_text


def state_rule(problem: Problem) -> str:
    """What may persist from one call to the next, as the judge runs the calls (worker/harness.py builds one
    ModelNew per evaluation; every checked and timed call gets inputs drawn afresh, docs/evaluation.md)."""
    fresh = ("every checked and timed call gets inputs drawn afresh from a seed the kernel has never seen, so "
             "nothing derived from a call's inputs may be kept for a later call: a result cached by shape, "
             "address or contents is a wrong answer when the judge checks that call")
    kept = ("compiled kernels, autotuning choices and scratch buffers kept per shape and dtype may persist")
    if problem.kind.builds_model:
        return ("the judge builds one ModelNew per evaluation, its weights from a seed of its own as the "
                "reference's are, and never changes them during the evaluation: state derived from the module's "
                "own parameters and buffers (a converted, transposed or quantised copy of a weight, made in "
                f"__init__ or on the first call) may persist across calls; {fresh}; {kept}")
    return (f"no member of `data` is constant (weights inside it included): {fresh}, and that holds for a "
            f"converted copy of an input too; {kept}")


def judge_limits_text() -> str:
    """The judge's own limits on a candidate's steps, over every step and both devices: "60 s to 300 s"."""
    limits = [s for phase, pair in LIMITS.items() if phase not in HARNESS_STEPS for s in pair]
    return f"{min(limits):g} s to {max(limits):g} s"


def _seconds(x: float) -> str:
    return f"{x:g} s"


@dataclass(frozen=True)
class Rules:
    """What the judge enforces on one run's candidates."""

    precision: str  # the precision policy in one sentence
    state: str  # what may persist across calls (state_rule)
    build_limit_s: float = BUILD_LIMIT_S  # the run's --build-limit
    step_limit_s: float | None = None  # the run's limit per step; None: the judge's own phase limits
    step_limit_from: str = ""  # where that limit comes from, in words ("--eval-timeout")
    interpreted: bool = False  # judged under the CPU interpreter

    @classmethod
    def for_problem(cls, problem: Problem, **settings) -> "Rules":
        """The rules of `problem` under `settings`, `precision` the run's policy (kscience.problems.precision)."""
        policy = settings.pop("precision", DEFAULT_POLICY)
        return cls(precision=policy_text(policy, problem.rtol, problem.atol), state=state_rule(problem), **settings)

    def step_text(self) -> str:
        """How long one step may wait for the kernel, in words."""
        side = 1 if self.interpreted else 0
        own = (f"importing {_seconds(LIMITS['import'][side])}, checking a shape {_seconds(LIMITS['check'][side])}, "
               f"timing a shape {_seconds(LIMITS['time'][side])}")
        if self.step_limit_s is None:
            return f"as long as the judge's own limits allow ({own})"
        source = f" ({self.step_limit_from})" if self.step_limit_from else ""
        return f"{_seconds(self.step_limit_s)}{source}, and never longer than the judge's own limits ({own})"

    def text(self) -> str:
        """The rules as the prompts state them, one bullet each."""
        paths = ("Triton (`@triton.jit`); CUDA C++ through `torch.utils.cpp_extension.load_inline`; or nvcc or c++ "
                 "run through `subprocess`, with the library loaded through `ctypes`, built into the folder named by "
                 f"the environment variable `{BUILD_DIR_VAR}` (`os.environ[\"{BUILD_DIR_VAR}\"]`), which the judge "
                 "keeps with the source so that judging the same source again does not rebuild. Other folders the "
                 "worker can write (its working folder, TMPDIR) are deleted after every evaluation, and there is no "
                 "network")
        if self.interpreted:
            paths += ("; under the CPU interpreter only Triton kernels run (interpreted), and load_inline, nvcc "
                      "and ctypes code cannot")
        return "\n".join([
            "# Rules the judge holds every kernel to",
            f"- Building: while a compiler runs in the judge's worker (Triton's ptxas; load_inline's ninja, nvcc "
            f"and c++; nvcc or c++ through subprocess) the step limit is not counted, up to {_seconds(self.build_limit_s)} "
            "of building per step (--build-limit); a build that runs longer is a timeout.",
            f"- Running: a step is importing the kernel file, checking one shape or timing one shape; it may wait "
            f"for the kernel {self.step_text()}, building not counted.",
            f"- Build paths that work: {paths}.",
            f"- Precision: {self.precision}.",
            f"- State across calls: {self.state}.",
        ])
