"""What a GPU MODE directory declares: its `task.yml` (shapes, helper files, tolerances, time limits)
and whether kscience can evaluate it at all. The loader (gpumode.py) turns these facts into a Problem."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import sys
from pathlib import Path

from kscience.problems.spec import ProblemError, Shape

DEFAULT_TOLERANCE = 1e-2  # only for a task with no check_implementation at all
_NOT_HELPERS = {"reference.py", "submission.py", "template.py"}  # loaded otherwise, or not at all
_STRUCTURED = re.compile(r"output_t\s*=\s*TypeVar\([^)]*bound\s*=\s*(tuple|list|dict)\b", re.IGNORECASE)


def _load_yaml():
    try:
        import yaml
    except ImportError:
        raise ProblemError("GPU MODE directories need PyYAML: pip install pyyaml") from None
    return yaml


def read_task(path: Path) -> dict:
    """task.yml as a mapping; a file that is not one is a one-line ProblemError."""
    yaml = _load_yaml()
    try:
        task = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ProblemError(f"{path}: not valid YAML{where}") from None
    if not isinstance(task, dict):
        raise ProblemError(f"{path}: expected a mapping of keys such as tests and benchmarks")
    return task


def _shapes(task: dict, key: str, path: Path) -> list[Shape] | None:
    """A list of spec dicts from task.yml with GPU MODE's `seed` removed (kscience picks seeds)."""
    entries = task.get(key)
    if entries is None:
        return None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ProblemError(f"{path}: `{key}` must be a list of mappings such as {{m: 64, seed: 1}}")
    return [{k: v for k, v in entry.items() if k != "seed"} for entry in entries]


def _size(shape: Shape) -> float:
    size = 1.0
    for value in shape.values():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            size *= value
    return size


def task_shapes(task: dict, path: Path) -> tuple[list[Shape], list[Shape], list[Shape], list[Shape]]:
    """(tests, benchmarks, cpu_tests, cpu_benchmarks); the CPU lists default to the smallest test shape."""
    tests = _shapes(task, "tests", path)
    benchmarks = _shapes(task, "benchmarks", path)
    if not tests or not benchmarks:
        raise ProblemError(f"{path}: needs non-empty `tests` and `benchmarks` lists")
    smallest = [min(tests, key=_size)]
    return (tests, benchmarks, _shapes(task, "cpu_tests", path) or smallest,
            _shapes(task, "cpu_benchmarks", path) or smallest)


def helper_files(folder: Path, task: dict) -> list[tuple[str, Path]]:
    """(module name, file) for each helper the reference may import, in task.yml's order."""
    listed = task.get("files")
    if not listed:
        return [(name[:-3], folder / name) for name in ("task.py", "utils.py") if (folder / name).is_file()]
    if not isinstance(listed, list) or not all(isinstance(e, dict) for e in listed):
        raise ProblemError(f"{folder}: task.yml `files` must be a list of {{name, source}} mappings")
    main = (task.get("config") or {}).get("main")
    helpers = []
    for entry in listed:
        name, source = entry.get("name", ""), entry.get("source", "")
        if not name.endswith(".py") or name in _NOT_HELPERS or name == main or source.startswith("@"):
            continue
        file = (folder / source).resolve()
        if not file.is_file():
            raise ProblemError(f"{folder}: task.yml lists {name} from {source}, which does not exist")
        helpers.append((name[:-3], file))
    return helpers


def declared_container(helpers: list[tuple[str, Path]]) -> str | None:
    """What task.py declares its output_t to be where it is several outputs ("tuple", "list" or "dict"), else None."""
    for name, file in helpers:
        match = _STRUCTURED.search(file.read_text(errors="replace")) if name == "task" else None
        if match:
            return match.group(1).lower()
    return None


def match_reference_kwargs(check) -> dict | None:
    """The keyword arguments of GPU MODE's `make_match_reference(ref_kernel, **kwargs)` closure,
    with `match_reference`'s own defaults for those not given; None for any other check."""
    if not inspect.isfunction(check):
        return None
    found = inspect.getclosurevars(check)
    if "reference" not in found.nonlocals:
        return None
    given = dict(found.nonlocals.get("kwargs") or {})
    matcher = found.globals.get("match_reference")
    if inspect.isfunction(matcher):
        for name, param in inspect.signature(matcher).parameters.items():
            if name in ("rtol", "atol") and param.default is not inspect.Parameter.empty:
                given.setdefault(name, param.default)
    return given


def tolerances(task: dict, reference) -> tuple[float, float]:
    """(rtol, atol): task.yml's `config`, else the task's make_match_reference, else DEFAULT_TOLERANCE."""
    config = task.get("config") or {}
    given = match_reference_kwargs(getattr(reference, "check_implementation", None)) or {}
    rtol = config.get("rtol", given.get("rtol", DEFAULT_TOLERANCE))
    atol = config.get("atol", given.get("atol", DEFAULT_TOLERANCE))
    return float(rtol), float(atol)


def _unsupported(folder: Path, task: dict) -> str | None:
    """Why kscience cannot evaluate this directory, in one line, or None."""
    main = (task.get("config") or {}).get("main")
    if main and main != "eval.py" and (folder / main).is_file():
        return f"its harness is its own {main}, not GPU MODE's eval.py"
    entries = [e for e in task.get("files") or [] if isinstance(e, dict)
               and str(e.get("source", "")).startswith("@") and e.get("name") != "submission.py"]
    if entries:
        return f"it has {len(entries) + 1} submission entry points, judged by its own eval.py"
    if task.get("multi_gpu"):
        return ("it runs one process per GPU on several GPUs at once (task.yml multi_gpu: true); "
                "kscience judges one process on one device")
    return None


def _missing_packages(files: list[Path], local: set[str]) -> list[str]:
    """Top-level packages the problem's files import that are not installed here."""
    missing = []
    for file in files:
        try:
            tree = ast.parse(file.read_text(errors="replace"))
        except SyntaxError:
            continue  # import_file says so, in one line
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top in local or top in missing or top in sys.builtin_module_names:
                    continue
                try:
                    found = importlib.util.find_spec(top)
                except (ImportError, ValueError):
                    found = None
                if found is None:
                    missing.append(top)
    return missing


def refuse_unsupported(folder: Path, task: dict, reference_file: Path, helpers: list[tuple[str, Path]]) -> None:
    """A one-line ProblemError where kscience cannot evaluate the directory: a harness of its own,
    several GPUs, or a reference that imports a package not installed here."""
    why_not = _unsupported(folder, task)
    missing = _missing_packages([reference_file] + [f for _, f in helpers],
                                {name for name, _ in helpers} | {"reference", "submission"})
    if missing and not why_not:
        why_not = f"its reference needs {', '.join(missing)}, not installed here"
    if why_not:
        raise ProblemError(f"{folder.name}: cannot be evaluated: {why_not}")


def description(task: dict, reference, name: str) -> str:
    for text in (task.get("description"), reference.__doc__):
        lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
        if lines:
            return lines[0]
    return f"GPU MODE problem {name}"


def time_limit(task: dict, task_file: Path) -> float | None:
    """Seconds GPU MODE grants one submission's correctness tests and benchmarks together (task.yml's
    test_timeout and benchmark_timeout, what one kscience evaluation does), or None where neither is set."""
    limits = [task[key] for key in ("test_timeout", "benchmark_timeout") if key in task]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in limits):
        raise ProblemError(f"{task_file}: test_timeout and benchmark_timeout must be positive numbers of seconds")
    return float(sum(limits)) if limits else None
