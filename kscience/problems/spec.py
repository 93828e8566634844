"""A problem: what to compute, how to check it, and what shapes to time it on.

In the spirit of GPU MODE's reference kernels, a problem is a handful of plain
functions and lists. `generate_input(seed, device, **shape)` builds the data a
candidate's `custom_kernel(data)` receives; `ref_kernel(data)` is the slow, obviously
right answer. The evaluator only ever talks to this dataclass, whatever file format
the problem came from (built-in folder, KernelBench file, GPU MODE directory); the format
itself is the problem's `kind` (kind.py), which is asked wherever formats differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from kscience.problems.kind import ProblemKind

Shape = dict  # keyword arguments of generate_input, e.g. {"m": 64, "n": 64, "k": 128}


class ProblemError(Exception):
    """A problem file or folder that cannot be loaded or is inconsistent."""


# Slots: a Problem carries the fields declared here and nothing else, so every reader can see what a
# problem may hold and `dataclasses.replace` keeps all of it.
@dataclass(slots=True)
class Problem:
    name: str  # the run's and the tables' name for it: the built-in's, the file's stem, the folder's
    description: str  # one line for listings and the scientist's task
    locator: str  # how a worker process reloads this problem: "softmax", "/path/model.py", "/path/dir"
    generate_input: Callable[..., Any]  # (seed, device, **shape) -> data (tuple of tensors)
    ref_kernel: Callable[[Any], Any]  # data -> expected output tensor
    rtol: float  # relative and absolute tolerance a candidate's output is compared with
    atol: float
    tests: list[Shape]  # shapes a candidate must be right on (GPU)
    benchmarks: list[Shape]  # shapes it is timed on, the score's geomean (GPU)
    cpu_tests: list[Shape]  # small shapes for the Triton interpreter
    cpu_benchmarks: list[Shape]
    kind: ProblemKind  # its format (kinds.py): what a candidate defines, how it is called, how many shapes
    flops: Callable[..., float] = lambda **shape: 0.0  # per call, for roofline; 0 = unknown
    bytes_moved: Callable[..., float] = lambda **shape: 0.0  # fewest bytes a call must move
    precision: str = "bf16"  # which peak rate bounds the arithmetic: "fp32", "bf16", "fp8"
    output_args: tuple[int, ...] = ()  # indices into data of buffers the candidate may write
    # Those of them whose initial content is part of the task (GPU MODE's zeroed `c`, which a kernel
    # may accumulate into): restored before every call instead of poisoned.
    zeroed_outputs: tuple[int, ...] = ()
    # The answer is a tuple, list or dict of tensors (GPU MODE's output_t): the worker packs it into
    # one tensor (problems/outputs.py) and `check` judges it member by member.
    several_outputs: bool = False
    seed_source: str | None = None  # a correct starting kernel (Triton, tunable knobs as literals)
    # What a PyTorch user would write, in the problem's own dtypes: the eager and torch.compile
    # baselines. The reference often computes in fp32 for accuracy, which would make it a straw man.
    eager_kernel: Callable[[Any], Any] | None = None  # None: the reference is already idiomatic
    # The vendor library a user would call instead of writing a kernel (cuBLAS through torch...), timed
    # as a baseline with whatever copies it needs; it raises with the reason where it cannot run.
    vendor_kernel: Callable[[Any], Any] | None = None
    vendor_label: str = ""  # e.g. "cuBLAS block-scaled fp8 (torch._scaled_mm, K-major copies)"
    # (rtol, atol) the vendor path is judged with where the library computes less exactly than the
    # problem asks of kernels; it is said wherever the vendor's time is shown
    vendor_tolerance: tuple[float, float] | None = None
    # What a user would install instead (problems/libraries.py: Liger-Kernel, QuACK...), each timed as a
    # baseline beside the vendor path
    libraries: tuple = ()
    # The vendor call alone (a Library whose `overrides` hand it inputs already in the layout it reads): shown
    # beside the vendor row, which pays for its copies, to say where the vendor's time goes; never a rival,
    # since kernels get the problem's own layout
    vendor_alone: Any = None
    # Entry points a candidate may not call (its libraries' and the problem's own, e.g. torch.mm): the judge
    # refuses a source that names one and traps them in the worker. Empty: a candidate may call anything.
    forbidden_calls: tuple[str, ...] = ()
    overrides: dict = field(default_factory=dict)  # --set NAME=VALUE applied at load time
    # (data, output, answer or None) -> None when right, else a one-line reason: the judge calls it,
    # in the trusted process, instead of comparing with ref_kernel's output (answers that are right
    # but not unique, or several tensors packed into one, see problems/outputs.py). Given no answer,
    # it computes one where it needs it.
    check: Callable[[Any, Any, Any], str | None] | None = None
    # `check` judges an output by itself and never needs ref_kernel's answer (a GPU MODE task's own
    # check_implementation): the judge then only sizes the answer, on the meta device.
    checks_alone: bool = False
    # The task's own limit on one evaluation, where it declares one (a GPU MODE task.yml's test and
    # benchmark timeouts together); `kscience eval` applies it unless told another.
    time_limit_s: float | None = None
    # How the list of inputs is handed to the candidate and the reference: a tuple, except for
    # GPU MODE tasks whose generate_input returns one bare tensor, which get that tensor.
    call_data: Callable[[list], Any] = tuple
    # The reference implementation as the scientist is shown it: a KernelBench file as run (after --set),
    # a GPU MODE task's reference.py and task.py; None: the briefing shows the source of the module that
    # defines ref_kernel (a built-in's reference.py)
    source_text: str | None = None
    constants: dict = field(default_factory=dict)  # the file's module-level constants as run, by name
    # (model class, seed, device) -> a model built with KernelBench's seeding, for the candidate's ModelNew
    # in the worker and the reference's Model in the judge; None for problems whose entry is a function
    make_model: Callable[..., Any] | None = None
    reference_model_class: type | None = None  # the file's `Model`, which the judge builds with make_model
    weights_seed: int = 0  # the seed make_model builds the reference's weights with

    @property
    def entry(self) -> str:
        """What a candidate defines: `custom_kernel`, or a KernelBench file's `ModelNew` (its kind says)."""
        return self.kind.entry

    def tolerance_for(self, kind: str, label: str = "") -> list[float] | None:
        """[rtol, atol] a candidate of this kind is judged with where it is not the problem's own: the
        vendor-library baseline's, or a library baseline's (named by the start of its `label`), where the
        problem declares one; None otherwise."""
        if kind in ("vendor", "vendor_alone") and self.vendor_tolerance:
            return list(self.vendor_tolerance)
        lib = self.library_named(label) if kind == "library" else None
        return list(lib.tolerance) if lib and lib.tolerance else None

    def overrides_for(self, kind: str) -> dict:
        """The settings a candidate of this kind is judged with: the problem's, and for the vendor call alone
        the layout its inputs are built in."""
        extra = self.vendor_alone.overrides if kind == "vendor_alone" and self.vendor_alone else {}
        return {**self.overrides, **extra}

    def library_named(self, label: str):
        """The library whose baseline row is labelled `label` (its name, then version and more), or None."""
        return next((lib for lib in self.libraries if label.startswith(lib.name)), None)

    def shapes(self, which: str, interpreted: bool) -> list[Shape]:
        """Shapes for "tests", "benchmarks" or "all", the small CPU lists under the interpreter."""
        tests = self.cpu_tests if interpreted else self.tests
        benches = self.cpu_benchmarks if interpreted else self.benchmarks
        if which == "tests":
            return list(tests)
        if which == "benchmarks":
            return list(benches)
        if which == "all":
            return list(tests) + [s for s in benches if s not in tests]
        raise ProblemError(f"unknown shape set {which!r} (tests, benchmarks or all)")

    def summary(self) -> dict:
        """What `kscience problems` lists: the problem, its tolerance and its shapes (on a GPU, and the smaller
        ones the CPU interpreter checks and times), each shape as its sizes and its label."""
        def shapes(which: list[Shape]) -> list[dict]:
            return [{"label": shape_label(s), "sizes": dict(s)} for s in which]

        return {"name": self.name, "description": self.description, "locator": self.locator,
                "kind": self.kind.name, "entry": self.entry, "rtol": self.rtol, "atol": self.atol,
                "n_tests": len(self.tests), "n_benchmarks": len(self.benchmarks),
                "tests": shapes(self.tests), "benchmarks": shapes(self.benchmarks),
                "cpu_tests": shapes(self.cpu_tests), "cpu_benchmarks": shapes(self.cpu_benchmarks),
                "has_seed": self.seed_source is not None}


def geomean(values: list[float]) -> float:
    """Geometric mean, the score over benchmark shapes (each shape counts equally)."""
    if not values:
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def shape_label(shape: Shape) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items()) or "default"
