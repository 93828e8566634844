"""Finding and loading problems: built-in folders, KernelBench files, GPU MODE directories.

A built-in problem is a folder beside this file holding `reference.py` (the spec as
module-level names, see `from_reference_module`) and `seed.py` (a correct Triton kernel).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from kscience.problems.files import import_file
from kscience.problems.gpumode import load_gpumode_dir, probed_facts
from kscience.problems.kernelbench import load_kernelbench_file
from kscience.problems.spec import Problem, ProblemError, Shape, geomean, shape_label

__all__ = ["Problem", "ProblemError", "Shape", "geomean", "shape_label", "builtin_names",
           "load_problem", "import_file", "from_reference_module", "probed_facts"]

_HERE = Path(__file__).parent


def builtin_names() -> list[str]:
    return sorted(p.name for p in _HERE.iterdir() if (p / "reference.py").is_file())


def from_reference_module(mod: ModuleType, name: str, locator: str, seed_source: str | None) -> Problem:
    """Build a Problem from a module in kscience's built-in reference format."""
    missing = [n for n in ("generate_input", "ref_kernel", "TESTS", "BENCHMARKS") if not hasattr(mod, n)]
    if missing:
        raise ProblemError(f"{locator}: reference module lacks {', '.join(missing)}")
    return Problem(
        name=name,
        description=getattr(mod, "DESCRIPTION", (mod.__doc__ or name).strip().splitlines()[0]),
        locator=locator,
        generate_input=mod.generate_input,
        ref_kernel=mod.ref_kernel,
        rtol=float(getattr(mod, "RTOL", 1e-2)),
        atol=float(getattr(mod, "ATOL", 1e-2)),
        tests=list(mod.TESTS),
        benchmarks=list(mod.BENCHMARKS),
        cpu_tests=list(getattr(mod, "CPU_TESTS", mod.TESTS[:1])),
        cpu_benchmarks=list(getattr(mod, "CPU_BENCHMARKS", mod.TESTS[:1])),
        flops=getattr(mod, "flops", lambda **s: 0.0),
        bytes_moved=getattr(mod, "bytes_moved", lambda **s: 0.0),
        precision=getattr(mod, "PRECISION", "bf16"),
        output_args=tuple(getattr(mod, "OUTPUT_ARGS", ())),
        seed_source=seed_source,
        eager_kernel=getattr(mod, "eager_kernel", None),
        vendor_kernel=getattr(mod, "vendor_kernel", None),
        vendor_label=getattr(mod, "VENDOR", ""),
        vendor_tolerance=getattr(mod, "VENDOR_TOLERANCE", None),
    )


def _load_builtin(name: str) -> Problem:
    folder = _HERE / name
    mod = import_file(folder / "reference.py", f"kscience_problem_{name}")
    seed = folder / "seed.py"
    return from_reference_module(mod, name, name, seed.read_text() if seed.is_file() else None)


def load_problem(locator: str, overrides: dict | None = None, probed: dict | None = None) -> Problem:
    """A built-in name, a KernelBench .py file, or a GPU MODE directory (`probed`: see load_gpumode_dir)."""
    overrides = dict(overrides or {})
    if locator in builtin_names():
        if overrides:
            raise ProblemError("--set applies to KernelBench files; built-in shapes are fixed")
        return _load_builtin(locator)
    path = Path(locator).expanduser()
    if path.is_dir():
        return load_gpumode_dir(path.resolve(), overrides, probed)
    if path.is_file() and path.suffix == ".py":
        return load_kernelbench_file(path.resolve(), overrides)
    raise no_such_problem(locator)


def no_such_problem(locator: str) -> ProblemError:
    """The one wording of "this names no problem", for `run`, `eval` and `campaign` alike."""
    return ProblemError(f"no problem {locator!r}: not a built-in ({', '.join(builtin_names())}), "
                        "a KernelBench .py file or a folder")
