"""The baselines every kernel of a run is compared to, written as candidates so the evaluator
times them exactly as it times kernels: PyTorch eager, the same under torch.compile (max-autotune),
the vendor library a user would call instead (cuBLAS...), where the problem names one, and the libraries a
user would install instead (Liger-Kernel, QuACK...), where it names them."""

from __future__ import annotations

from kscience.problems import Problem
from kscience.problems.libraries import Library
from kscience.record.candidate import Candidate


def _baseline_head(problem: Problem, doc: str, imports: str = "") -> str:
    """The problem loaded in the worker: a built-in by name; a file problem by the run's path, which is the copy
    its request carried where that path does not exist (kscience.problems.bundle)."""
    if problem.kind.in_package:
        loads = f"from kscience.problems import load_problem\n\n_PROBLEM = load_problem({problem.locator!r}, "
    else:
        loads = ("from kscience.problems import load_problem\nfrom kscience.problems.bundle import loaded_copy\n\n"
                 f"_PROBLEM = load_problem(loaded_copy({problem.locator!r}), ")
    return (f'"""{doc}"""\n{imports}{loads}{dict(problem.overrides)!r})\n'
            "_EAGER = _PROBLEM.eager_kernel or _PROBLEM.ref_kernel\n\n\n")


def reference_source(problem: Problem) -> str:
    """PyTorch as a user would write it (the problem's eager kernel, else its reference), as a
    candidate, so the evaluator can time it as the baseline every kernel is compared to."""
    head = _baseline_head(problem, "The problem in plain PyTorch as a candidate: the eager baseline.")
    if problem.kind.builds_model:
        return head + "class ModelNew(_PROBLEM.reference_model_class):\n    pass\n"
    return head + "def custom_kernel(data):\n    return _EAGER(data)\n"


# max-autotune: inductor benchmarks its Triton templates and cuBLAS per shape, the best a user gets from
# torch.compile. Without CUDA graphs: a graph replays into static buffers that the next call overwrites,
# and the harness keeps each call's output to check it.
COMPILE_MODE = "max-autotune-no-cudagraphs"
# One graph specialised and autotuned per shape, as a user compiling for the shapes they run gets. Left
# dynamic, dynamo recompiles with symbolic sizes at the second shape, the likely cause of a compiled
# matmul 36x slower than in the default mode on an H100 (9,047 against 251 us geomean). Each shape
# needs its own compilation, so dynamo's limit on recompilations (8 by default, after which it runs
# eager) is raised to cover a problem's every shape.
COMPILE_ARGS = f"mode={COMPILE_MODE!r}, dynamic=False"


# torch.compile in max-autotune benchmarks inductor's templates on every shape of the problem: on an H100
# it takes 325 s of a 400 s fp8 run, against 1-3 s for the eager and vendor baselines. Its
# time depends only on its source, the GPU and the versions, so a run takes it from an earlier run of the
# same store that timed the same source there. The cheap baselines are timed by every run.
REUSED_BASELINES = ("compiled",)


def _compile_head(problem: Problem) -> str:
    """Lines that let dynamo compile once for every shape of the problem (twice over, for guards
    other than sizes)."""
    needed = 2 * (len(problem.tests) + len(problem.benchmarks))
    return ("import torch._dynamo\n\n"
            f"torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, {needed})\n\n")


def vendor_source(problem: Problem) -> str | None:
    """The problem's vendor-library path as a candidate, or None where it declares none. Where the library
    cannot run (a CPU, an older CUDA) the call raises, and the baseline is stored with that reason."""
    if problem.vendor_kernel is None or problem.kind.builds_model:
        return None
    head = _baseline_head(problem, f"The vendor library a user would call: {problem.vendor_label}.")
    return head + "def custom_kernel(data):\n    return _PROBLEM.vendor_kernel(data)\n"


def vendor_alone_source(problem: Problem) -> str | None:
    """The vendor call alone as a candidate (judged on inputs already in its layout: Problem.overrides_for), or
    None where the problem declares no such call."""
    if problem.vendor_alone is None or problem.vendor_kernel is None or problem.kind.builds_model:
        return None
    head = _baseline_head(problem, f"The vendor call alone: {problem.vendor_alone.name}.",
                          "from kscience.problems.libraries import resolve\n")
    return head + "_ALONE = resolve(_PROBLEM.vendor_alone.call)\n\n\ndef custom_kernel(data):\n    return _ALONE(data)\n"


def vendor_title(problem: Problem, label: str | None = None) -> str:
    """The vendor path's label (or `label`: the vendor call alone's), with the tolerance it is judged at where
    that is not the kernels'."""
    label = problem.vendor_label if label is None else label
    if not problem.vendor_tolerance:
        return label
    rtol, atol = problem.vendor_tolerance
    return (f"{label}; judged at rtol {rtol:g}, atol {atol:g} "
            f"(kernels: rtol {problem.rtol:g}, atol {problem.atol:g})")


def library_candidate(lib: Library) -> str:
    """A library a user would install, as a candidate: the function its declaration names, called on the
    problem's data (it raises with the reason where the library cannot run on the device)."""
    module, _, function = lib.call.partition(":")
    return (f'"""What a user would install instead: {lib.name} ({lib.distribution}), {lib.why}."""\n'
            f"from {module} import {function} as _library_call\n\n\n"
            "def custom_kernel(data):\n    return _library_call(data)\n")


def library_title(problem: Problem, lib: Library) -> str:
    """The library's row label: name and version installed here, and its tolerance where not the kernels'."""
    if not lib.tolerance:
        return lib.title
    rtol, atol = lib.tolerance
    return f"{lib.title}; judged at rtol {rtol:g}, atol {atol:g} (kernels: rtol {problem.rtol:g}, atol {problem.atol:g})"


def compiled_source(problem: Problem) -> str:
    """The eager baseline under torch.compile (max-autotune) as a candidate: the baseline a kernel
    must beat to be worth writing by hand."""
    head = _baseline_head(problem, "The problem in plain PyTorch under torch.compile, timed as a baseline.",
                          "import torch\n" + _compile_head(problem))
    if problem.kind.builds_model:
        # Compile the forward, not the module: a compiled module kept as an attribute would be a submodule
        # that contains its own parent.
        return head + ("class ModelNew(_PROBLEM.reference_model_class):\n"
                       "    def __init__(self, *args, **kwargs):\n"
                       "        super().__init__(*args, **kwargs)\n"
                       f"        self._compiled_forward = torch.compile(super().forward, {COMPILE_ARGS})\n\n"
                       "    def forward(self, *args, **kwargs):\n"
                       "        return self._compiled_forward(*args, **kwargs)\n")
    return head + (f"_compiled = torch.compile(_EAGER, {COMPILE_ARGS})\n\n\n"
                   "def custom_kernel(data):\n    return _compiled(data)\n")


def compiled_baseline_wanted(setting: bool | None, seed: Candidate) -> bool:
    """Whether to time torch.compile of the reference: as set, else when the (passing) seed was judged on
    a GPU. Under the CPU interpreter inductor would spend minutes compiling C++ for a number that says
    nothing about GPU kernels."""
    if setting is not None:
        return setting
    return seed.device.interpreted is False
