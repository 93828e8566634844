"""Built-in problems: a folder beside this file holding `reference.py` (the spec as module-level names,
see `from_reference_module`) and `seed.py` (a correct Triton kernel), named by the folder's name."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from kscience.problems.files import import_file
from kscience.problems.kind import ProblemKind
from kscience.problems.libraries import Library, forbidden_entry_points
from kscience.problems.spec import Problem, ProblemError

_HERE = Path(__file__).parent


def builtin_names() -> list[str]:
    return sorted(p.name for p in _HERE.iterdir() if (p / "reference.py").is_file())


def from_reference_module(mod: ModuleType, name: str, locator: str, seed_source: str | None,
                          overrides: dict | None = None) -> Problem:
    """Build a Problem from a module in kscience's built-in reference format (`overrides`: the --set
    values already applied to the module)."""
    missing = [n for n in ("generate_input", "ref_kernel", "TESTS", "BENCHMARKS") if not hasattr(mod, n)]
    if missing:
        raise ProblemError(f"{locator}: reference module lacks {', '.join(missing)}")
    libraries = tuple(getattr(mod, "LIBRARIES", ()))
    if not all(isinstance(lib, Library) for lib in libraries):
        raise ProblemError(f"{locator}: LIBRARIES holds kscience.problems.libraries.Library entries only")
    return Problem(
        kind=KIND,
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
        libraries=libraries,
        vendor_alone=getattr(mod, "VENDOR_ALONE", None),
        forbidden_calls=_forbidden_calls(mod, locator, libraries),
        overrides=dict(overrides or {}),
    )


def _forbidden_calls(mod: ModuleType, locator: str, libraries: tuple[Library, ...]) -> tuple[str, ...]:
    """LIBRARY_CALLS = "forbidden": no candidate may call the libraries' entry points, nor FORBIDDEN_CALLS
    (the vendor's, e.g. torch.mm); "allowed" (the default): it may."""
    rule = getattr(mod, "LIBRARY_CALLS", "allowed")
    if rule not in ("allowed", "forbidden"):
        raise ProblemError(f"{locator}: LIBRARY_CALLS is 'allowed' or 'forbidden', not {rule!r}")
    return forbidden_entry_points(libraries, tuple(getattr(mod, "FORBIDDEN_CALLS", ()))) if rule == "forbidden" else ()


def load_builtin(name: str, overrides: dict) -> Problem:
    folder = _HERE / name
    mod = import_file(folder / "reference.py", f"kscience_problem_{name}")
    # Shapes are fixed; a constant the module names in OVERRIDABLE (fp8's operand layout) may be set
    settable = getattr(mod, "OVERRIDABLE", {})
    for key, value in overrides.items():
        if value not in settable.get(key, ()):
            raise ProblemError(f"--set applies to KernelBench files and to the constants a built-in names "
                               f"({', '.join(f'{k}: {v}' for k, v in settable.items()) or 'none for ' + name}); "
                               f"not {key}={value!r}")
        setattr(mod, key, value)
    seed = folder / "seed.py"
    return from_reference_module(mod, name, name, seed.read_text() if seed.is_file() else None, overrides)


class BuiltinKind(ProblemKind):
    name, title, in_package = "builtin", "a built-in", True

    def claims(self, locator: str) -> bool:
        return locator in builtin_names()

    def load(self, locator: str, overrides: dict, probed: dict | None) -> Problem:
        return load_builtin(locator, overrides)


KIND = BuiltinKind()
