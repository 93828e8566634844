"""What a user would install instead of writing a kernel: library baselines, and the rule on calling them.

A problem may name a few libraries that already do its job (Liger-Kernel's Triton RMSNorm, QuACK's CuTe-DSL
softmax...). Each is timed as a baseline by the same judge as every kernel, and where its kernel is Python
source the model is shown it as a third-party reference to learn from. Whether a candidate may call such a
library itself is the problem's rule: the built-ins forbid it, so a "discovery" that only calls the
baseline is never reported as a kernel of the model's.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass, field

INSTALL_HINT = "pip install 'kscience[baselines]'"
# cuBLAS's GEMM as PyTorch offers it, under each of its names: what the GEMM built-ins (matmul, swiglu,
# fp8_blockscale_gemm) forbid their kernels to call, each being measured against it.
GEMM_CALLS = ("torch.mm", "torch.matmul", "torch.Tensor.__matmul__", "torch.Tensor.__rmatmul__", "torch.Tensor.mm",
              "torch.Tensor.matmul", "torch.bmm", "torch.Tensor.bmm", "torch.addmm", "torch.Tensor.addmm",
              "torch.baddbmm", "torch.addbmm", "torch.nn.functional.linear", "torch.einsum", "torch.tensordot",
              "torch.chain_matmul", "torch.linalg.matmul", "torch.linalg.multi_dot")
# The most of a library's source put in a prompt: a kernel file, not a package.
SOURCE_CHARS = 12_000


@dataclass(frozen=True)
class Library:
    """One library a user would install for this problem."""

    name: str  # shown on its baseline row: "Liger-Kernel RMSNorm"
    distribution: str  # the package to install, whose version is shown: "liger-kernel"
    module: str  # what is imported, to find out whether it is there: "liger_kernel"
    # How it is called: "package.module:function", a function taking the problem's data and returning its
    # output; it raises with the reason where the library cannot run on this device.
    call: str
    why: str  # why a user would pick it, shown with its time
    # Dotted names a candidate may not call where the problem forbids calling libraries
    # ("liger_kernel" refuses the whole package, "torch.mm" one function).
    entry_points: tuple[str, ...] = ()
    tolerance: tuple[float, float] | None = None  # (rtol, atol) where the library computes less exactly
    source_module: str | None = None  # the module whose (Triton) source the model may learn from
    licence: str = ""  # the licence its source is shown under, by name
    # Problem constants its inputs are built with (OVERRIDABLE in the reference module): the vendor call
    # alone gets its operands in the layout it reads, copies made before the timed call
    overrides: dict = field(default_factory=dict)

    @property
    def title(self) -> str:
        """The name with the version installed here, or that it is not."""
        version = installed_version(self.distribution)
        return f"{self.name} ({self.distribution} {version})" if version else f"{self.name} ({self.distribution})"


def liger(what: str, call: str, ops_module: str, why: str = "") -> Library:
    """A Liger-Kernel (linkedin/Liger-Kernel) kernel: Triton source, so the model may learn from it."""
    return Library(name=f"Liger-Kernel {what}", distribution="liger-kernel", module="liger_kernel", call=call,
                   why=why or f"LinkedIn's Triton kernels for LLM training: the {what} a PyTorch user swaps in",
                   entry_points=("liger_kernel",), source_module=ops_module, licence="BSD-2-Clause")


def quack(what: str, call: str) -> Library:
    """A QuACK (Dao-AILab/quack) kernel: CuTe DSL, for NVIDIA sm90 and later."""
    return Library(name=f"QuACK {what}", distribution="quack-kernels", module="quack", call=call,
                   why="CuTe-DSL kernels for Hopper and Blackwell (Dao-AILab), near the memory bandwidth by its "
                       "authors' figures", entry_points=("quack",), licence="Apache-2.0")


class LibraryMissing(RuntimeError):
    """A library baseline whose package is not installed: its one line says how to get it."""


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing_line(lib: Library) -> str | None:
    """One line saying the library is not installed here, or None where it is."""
    if importlib.util.find_spec(lib.module.split(".")[0]) is not None:
        return None
    return f"{lib.name}: {lib.distribution} is not installed ({INSTALL_HINT}); its baseline is skipped"


def skipped_line(libraries) -> str | None:
    """One line for every library among `libraries` not installed here (their baselines are skipped), or None."""
    missing = [lib for lib in libraries if missing_line(lib)]
    if not missing:
        return None
    return (f"baselines skipped, not installed here ({INSTALL_HINT}): "
            + ", ".join(f"{lib.name} ({lib.distribution})" for lib in missing))


def require(module: str, distribution: str):
    """The module, imported, or LibraryMissing with the line that says how to install it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.split(".")[0] != exc.name.split(".")[0]:
            raise  # the library is there but one of its own imports is not: its own error says which
        raise LibraryMissing(f"{distribution} is not installed ({INSTALL_HINT})") from None


def require_sm90(x, library: str) -> None:
    """Raises with the reason where `x` is not on an NVIDIA GPU of sm90 or later (CuTe-DSL kernels)."""
    import torch

    if x.device.type != "cuda" or torch.version.hip is not None or torch.cuda.get_device_capability(x.device) < (9, 0):
        where = x.device.type if x.device.type != "cuda" else torch.cuda.get_device_name(x.device)
        raise RuntimeError(f"{library} needs an NVIDIA GPU of sm90 or later (Hopper, Blackwell); here: {where}")


def resolve(call: str):
    """The function a library's `call` names."""
    module, _, function = call.partition(":")
    return getattr(importlib.import_module(module), function)


def library_source(lib: Library) -> str | None:
    """The library kernel's own source, read from the installed package without importing it; None where
    it declares none, is not installed, or is not Python source."""
    if not lib.source_module:
        return None
    try:
        spec = importlib.util.find_spec(lib.source_module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return text if len(text) <= SOURCE_CHARS else text[:SOURCE_CHARS] + "\n# ... (cut here)\n"


def library_notes(problem, sources: bool = True) -> str:
    """The problem's rule on calling its baselines' libraries, then (`sources`) those library kernels that are
    Python source (Liger's Triton), each labelled as a third-party library with its licence, for the designer
    and the writer to learn from. Empty where the problem names no library and forbids nothing."""
    if not problem.libraries and not problem.forbidden_calls:
        return ""
    parts = []
    if problem.forbidden_calls:
        parts.append("Calling a baseline's library is FORBIDDEN on this problem: the judge refuses a kernel that "
                     f"imports or calls any of {', '.join(problem.forbidden_calls)}. Write the kernel yourself.")
    else:
        parts.append("A kernel may call the libraries below; it is then compared with them as baselines.")
    for lib in problem.libraries:
        text = library_source(lib) if sources else None
        if text is None:
            continue
        parts.append(f"Third-party library kernel to learn from, not to call: {lib.name}, module {lib.source_module} "
                     f"of {lib.distribution} (licence: {lib.licence or 'see the package'}). It is a baseline your "
                     f"kernel must beat.\n```python\n{text}\n```")
    return "\n\n".join(parts)


def forbidden_entry_points(libraries, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every entry point a candidate may not call: each library's and the problem's own (torch.mm...)."""
    names: list[str] = []
    for name in [n for lib in libraries for n in lib.entry_points] + list(extra):
        if name not in names:
            names.append(name)
    return tuple(names)
