"""The baselines every kernel of a run is compared to, written as candidates so the evaluator
times them exactly as it times kernels: PyTorch eager, and the same under torch.compile."""

from __future__ import annotations

from kscience.problems import Problem


def _baseline_head(problem: Problem, doc: str, imports: str = "") -> str:
    return (f'"""{doc}"""\n{imports}from kscience.problems import load_problem\n\n'
            f"_PROBLEM = load_problem({problem.locator!r}, {dict(problem.overrides)!r})\n"
            "_EAGER = _PROBLEM.eager_kernel or _PROBLEM.ref_kernel\n\n\n")


def reference_source(problem: Problem) -> str:
    """PyTorch as a user would write it (the problem's eager kernel, else its reference), as a
    candidate, so the evaluator can time it as the baseline every kernel is compared to."""
    head = _baseline_head(problem, "The problem in plain PyTorch as a candidate: the eager baseline.")
    if problem.entry == "ModelNew":
        return head + "class ModelNew(_PROBLEM.reference_model_class):\n    pass\n"
    return head + "def custom_kernel(data):\n    return _EAGER(data)\n"


def compiled_source(problem: Problem) -> str:
    """The eager baseline under torch.compile (default settings) as a candidate: the baseline a kernel
    must beat to be worth writing by hand."""
    head = _baseline_head(problem, "The problem in plain PyTorch under torch.compile, timed as a baseline.",
                          "import torch\n\n")
    if problem.entry == "ModelNew":
        # Compile the forward, not the module: a compiled module kept as an attribute would be a submodule
        # that contains its own parent.
        return head + ("class ModelNew(_PROBLEM.reference_model_class):\n"
                       "    def __init__(self, *args, **kwargs):\n"
                       "        super().__init__(*args, **kwargs)\n"
                       "        self._compiled_forward = torch.compile(super().forward)\n\n"
                       "    def forward(self, *args, **kwargs):\n"
                       "        return self._compiled_forward(*args, **kwargs)\n")
    return head + ("_compiled = torch.compile(_EAGER)\n\n\n"
                   "def custom_kernel(data):\n    return _compiled(data)\n")


def compiled_baseline_wanted(setting: bool | None, seed: dict) -> bool:
    """Whether to time torch.compile of the reference: as set, else when the (passing) seed was judged on
    a GPU. Under the CPU interpreter inductor would spend minutes compiling C++ for a number that says
    nothing about GPU kernels."""
    if setting is not None:
        return setting
    return ((seed.get("result") or {}).get("device") or {}).get("interpreted") is False
