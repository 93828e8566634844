"""GPU MODE problem directories (the reference-kernels repository) as kscience Problems.

Such a directory holds `reference.py` with `generate_input(**spec)` and `ref_kernel(data)`,
where the spec is one entry of `task.yml`'s `tests:` or `benchmarks:` lists and includes
the random `seed`; `task.yml` may list helper files (`files:`, e.g. `task.py` and a shared
`../utils.py`) that the reference and submissions import by bare name; `submission.py`,
when present, is a working candidate and becomes the seed kernel.

What kscience reads beyond GPU MODE's own keys, all optional in `task.yml`:
  `cpu_tests`, `cpu_benchmarks`: small shapes for the Triton interpreter (default: the
      smallest test shape);
  `output_args`: indices of preallocated outputs in the data tuple. GPU MODE's harness
      hands candidates a copy and never checks inputs, whereas kscience requires every
      other argument to come back unchanged, so a task whose submissions fill a buffer
      (such as `c` in amd-fp8-mm) must name it here;
  `config: {rtol, atol}`: tolerances. Without them, the ones given to GPU MODE's
      `make_match_reference` helper for `check_implementation` are used, else 1e-2.

A `check_implementation` other than that helper (a residual test for a factorisation whose
answer is not unique) becomes the problem's `check`: the judge calls it, in the trusted process,
instead of comparing with the reference's output, on the same fresh inputs and with the same
poisoned outputs and unchanged-input checks. It may return GPU MODE's `''`/message or
`(ok, message)`.

On a machine without a GPU the reference's own code runs under `device_map.mapped_device`, so
tensors and generators it asks for on `'cuda'` are made on the CPU.

Directories that still cannot run say why in one line: a task whose main is its own `eval.py`
with several entry points, or whose output type is a tuple of tensors (kscience judges one
output tensor).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import torch

from kscience.problems.device_map import mapped_device, proxy_torch
from kscience.problems.files import import_file
from kscience.problems.spec import Problem, ProblemError, Shape, shape_label

DEFAULT_TOLERANCE = 1e-2
_NOT_HELPERS = {"reference.py", "submission.py", "template.py"}  # loaded otherwise, or not at all


def _load_yaml():
    try:
        import yaml
    except ImportError:
        raise ProblemError("GPU MODE directories need PyYAML: pip install pyyaml") from None
    return yaml


def _read_task(path: Path) -> dict:
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


def _helper_files(folder: Path, task: dict) -> list[tuple[str, Path]]:
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


def _tolerances(task: dict, reference) -> tuple[float, float]:
    config = task.get("config") or {}
    given = {}
    check = getattr(reference, "check_implementation", None)
    if inspect.isfunction(check):
        # GPU MODE's make_match_reference(ref_kernel, rtol=..., atol=...) returns a closure
        # over its keyword arguments: those are the task's own tolerances.
        captured = inspect.getclosurevars(check).nonlocals.get("kwargs")
        if isinstance(captured, dict):
            given = captured
    rtol = config.get("rtol", given.get("rtol", DEFAULT_TOLERANCE))
    atol = config.get("atol", given.get("atol", DEFAULT_TOLERANCE))
    return float(rtol), float(atol)


def _own_check(reference):
    """The reference's `check_implementation` when it is a check of its own, normalised to
    `(data, output) -> None | reason`; None when absent or GPU MODE's make_match_reference (a
    closure over `reference`), which kscience's comparison already does with the same tolerances."""
    check = getattr(reference, "check_implementation", None)
    if not callable(check):
        return None
    if inspect.isfunction(check) and "reference" in inspect.getclosurevars(check).nonlocals:
        return None

    def problem_check(data, output):
        verdict = check(data, output)
        if isinstance(verdict, tuple):  # (ok, message)
            return None if verdict[0] else (str(verdict[1]) or "check_implementation failed")
        return str(verdict) if verdict else None  # GPU MODE's '' for a pass, a message otherwise

    return problem_check


def _unsupported(folder: Path, task: dict, helpers: list) -> str | None:
    """Why kscience cannot evaluate this directory, in one line, or None."""
    main = (task.get("config") or {}).get("main")
    if main and main != "eval.py" and (folder / main).is_file():
        return f"its harness is its own {main}, not GPU MODE's eval.py"
    entries = [e for e in task.get("files") or [] if isinstance(e, dict)
               and str(e.get("source", "")).startswith("@") and e.get("name") != "submission.py"]
    if entries:
        return f"it has {len(entries) + 1} submission entry points, judged by its own eval.py"
    task_py = dict(helpers).get("task")
    if task_py is not None:
        text = task_py.read_text(errors="replace")
        if re.search(r"output_t\s*=\s*TypeVar\([^)]*bound\s*=\s*tuple", text):
            return "its output is a tuple of tensors (task.py output_t); kscience judges one output tensor"
    return None


def _description(task: dict, reference, name: str) -> str:
    for text in (task.get("description"), reference.__doc__):
        lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
        if lines:
            return lines[0]
    return f"GPU MODE problem {name}"


def _map_tensors(data, fn):
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, (tuple, list)):
        return type(data)(_map_tensors(x, fn) for x in data)
    if isinstance(data, dict):
        return {k: _map_tensors(v, fn) for k, v in data.items()}
    return data


def load_gpumode_dir(path: Path, overrides: dict) -> Problem:
    """A Problem from a GPU MODE directory; its `generate_input` takes kscience's (seed, device, **shape)."""
    folder = Path(path)
    if overrides:
        raise ProblemError("--set applies to KernelBench files; GPU MODE shapes come from task.yml")
    task_file, reference_file = folder / "task.yml", folder / "reference.py"
    if not (task_file.is_file() and reference_file.is_file()):
        raise ProblemError(f"{folder}: not a GPU MODE problem directory (needs task.yml and reference.py)")
    task = _read_task(task_file)
    tests = _shapes(task, "tests", task_file)
    benchmarks = _shapes(task, "benchmarks", task_file)
    if not tests or not benchmarks:
        raise ProblemError(f"{task_file}: needs non-empty `tests` and `benchmarks` lists")
    smallest = [min(tests, key=_size)]
    cpu_tests = _shapes(task, "cpu_tests", task_file) or smallest
    cpu_benchmarks = _shapes(task, "cpu_benchmarks", task_file) or smallest

    # The reference and submissions say `from task import ...`, `from utils import ...`:
    # the helpers stay registered under those bare names for candidates to import too.
    helpers = _helper_files(folder, task)
    why_not = _unsupported(folder, task, helpers)
    if why_not:
        raise ProblemError(f"{folder.name}: cannot be evaluated: {why_not}")
    for module_name, file in helpers:
        proxy_torch(import_file(file, module_name))
    safe_name = re.sub(r"\W", "_", folder.name)
    reference = import_file(reference_file, f"kscience_gpumode_{safe_name}_reference")
    proxy_torch(reference)
    missing = [n for n in ("generate_input", "ref_kernel") if not callable(getattr(reference, n, None))]
    if missing:
        raise ProblemError(f"{reference_file}: lacks {', '.join(missing)}")

    def generate_input(seed: int, device="cuda", **shape):
        try:
            # Tensors made without a device land on the target one; those made on 'cuda' explicitly
            # do too when the target is not a GPU (see device_map).
            with torch.device(device), mapped_device(device):
                data = reference.generate_input(**shape, seed=seed)
        except Exception as exc:
            first_line = (str(exc).strip().splitlines() or [""])[0]
            raise ProblemError(f"{reference_file}: generate_input({shape_label(shape)}) failed on "
                               f"{device}: {type(exc).__name__}: {first_line}") from None
        if isinstance(data, torch.Tensor):  # a bare tensor is one input, not a sequence of rows
            bare.append(True)
            return (data.to(device),)
        return _map_tensors(data, lambda t: t.to(device))

    bare: list[bool] = []  # set once generate_input has returned a bare tensor in this process

    def call_data(data: list):
        return data[0] if bare else tuple(data)

    def ref_kernel(data):
        # GPU MODE references may write their answer into a preallocated output in `data`;
        # working on a copy keeps that answer out of the buffer a candidate is given.
        copy = _map_tensors(data, lambda t: t.clone())
        with mapped_device(_device_of(copy)):
            return reference.ref_kernel(copy)

    own_check = _own_check(reference)

    def check(data, output):
        with mapped_device(_device_of(data)):
            return own_check(data, output)

    rtol, atol = _tolerances(task, reference)
    output_args = task.get("output_args") or []
    if not isinstance(output_args, list) or not all(isinstance(i, int) for i in output_args):
        raise ProblemError(f"{task_file}: `output_args` must be a list of data indices")
    submission = folder / "submission.py"
    return Problem(
        name=folder.name,
        description=_description(task, reference, folder.name),
        locator=str(folder),
        generate_input=generate_input,
        ref_kernel=ref_kernel,
        rtol=rtol,
        atol=atol,
        tests=tests,
        benchmarks=benchmarks,
        cpu_tests=cpu_tests,
        cpu_benchmarks=cpu_benchmarks,
        output_args=tuple(output_args),
        call_data=call_data,
        seed_source=submission.read_text() if submission.is_file() else None,
        check=check if own_check else None,
    )


def _device_of(data) -> str:
    found = []
    _map_tensors(data, lambda t: found.append(t.device))
    return str(found[0]) if found else "cpu"
