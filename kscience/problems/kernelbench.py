"""KernelBench problem files (Ouyang et al. 2025) as kscience Problems.

A KernelBench file defines `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`
and module-level size constants such as `batch_size`. A candidate defines `ModelNew`, a
drop-in replacement for `Model` with the same constructor arguments and `forward`.

`--set NAME=VALUE` overrides rewrite the constant's assignment in the source before it
runs, so constants derived from it and default arguments that read it follow along.

Seeding convention, after KernelBench's own evaluator, which seeds the RNG right before
each model is built so that `Model` and `ModelNew` start from identical weights:

* `generate_input(seed, device)` calls `get_inputs()` with the CPU RNG seeded by `seed`
  and moves the tensors to `device`; the data is the tuple of `forward` arguments. The
  problem's one shape is the module's integer constants as run (`sizes_of`), so a verdict
  names its shape by them; given as keywords, they must be those values.
* `problem.make_model(cls, seed, device)` seeds the RNG, calls `get_init_inputs()`, seeds
  again and builds `cls(*init_inputs)` on the CPU, then moves the model to `device`.
  The trusted side builds `problem.reference_model_class` (the file's `Model`) and the
  worker builds the candidate's `ModelNew`, both with `problem.weights_seed`.
* `ref_kernel(data)` runs `Model` built that way with `weights_seed` (0) on data's device.

The seed is the reference itself (`seed_from_reference`): the file as run, with a `ModelNew`
that inherits from `Model`; a scientist's first task is to replace its operations with kernels.
`problem.source_text` and `problem.constants` show the file and its constants after `--set`.

Tolerance: KernelBench v0 and v0.1 compare with atol = rtol = 1e-2 (its later evaluator
keeps 1e-2 for fp16/bf16 and tightens fp32 to 1e-4); kscience uses 1e-2, since a Triton
`tl.dot` on fp32 inputs runs in TF32 by default.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import ModuleType

import torch

from kscience.problems.kind import ProblemKind
from kscience.problems.spec import Problem, ProblemError, shape_label

TOLERANCE = 1e-2
WEIGHTS_SEED = 0
_REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def parse_override_value(text: str):
    """A Python literal if the text is one ("4", "(2, 3)", "1e-3"), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def module_constants(tree: ast.Module) -> dict[str, ast.stmt]:
    """Top-level `NAME = value` (or `NAME: type = value`) statements, by name."""
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            constants[node.target.id] = node
    return constants


def _apply_overrides(tree: ast.Module, overrides: dict, path: Path) -> list[tuple[ast.stmt, str, object]]:
    """Rewrite each overridden constant in `tree`; return (statement, name, value) for each."""
    constants = module_constants(tree)
    done = []
    for name, text in overrides.items():
        if name not in constants:
            known = ", ".join(sorted(constants)) or "none"
            raise ProblemError(f"{path.name}: --set {name}: no module-level constant of that name (has: {known})")
        value = parse_override_value(text) if isinstance(text, str) else text
        done.append((constants[name], name, value))
        constants[name].value = ast.parse(repr(value), mode="eval").body
    ast.fix_missing_locations(tree)
    return done


def _rewritten_text(source: str, done: list[tuple[ast.stmt, str, object]]) -> str:
    """The file as it runs: each overridden assignment replaced by its new value, marked as such."""
    lines = source.splitlines()
    for node, name, value in sorted(done, key=lambda d: -d[0].lineno):
        indent = lines[node.lineno - 1][:node.col_offset]
        lines[node.lineno - 1:node.end_lineno] = [f"{indent}{name} = {value!r}  # set with --set"]
    return "\n".join(lines) + "\n"


def _exec_source(path: Path, overrides: dict) -> tuple[ModuleType, str, list[str]]:
    """Run the (rewritten) file as a fresh module; any failure becomes a one-line ProblemError.
    Returns the module, its text as run, and the names of its module-level constants."""
    try:
        source = path.read_text()
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"{path}: SyntaxError: {exc.msg} (line {exc.lineno})") from None
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc.strerror}") from None
    done = _apply_overrides(tree, overrides, path)
    names = list(module_constants(tree))
    module_name = f"kscience_kernelbench_{path.stem}"
    module = ModuleType(module_name)
    module.__file__ = str(path)
    sys.modules[module_name] = module  # pickling and dataclasses look classes up by module
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    except Exception as exc:  # a broken problem file is bad input, not a crash
        sys.modules.pop(module_name, None)
        raise ProblemError(f"{path}: {type(exc).__name__}: {exc}") from None
    missing = [name for name in _REQUIRED if not hasattr(module, name)]
    if missing:
        raise ProblemError(f"{path}: not a KernelBench file: it lacks {', '.join(missing)}")
    return module, _rewritten_text(source, done), names


def _constants(module: ModuleType, names: list[str]) -> dict:
    """The module constants' values as run (after --set): plain numbers, strings and tuples of them."""
    plain = (int, float, str, bool, tuple, type(None))
    return {n: module.__dict__[n] for n in names if isinstance(module.__dict__.get(n), plain)}


def sizes_of(constants: dict) -> dict:
    """The module's integer constants (batch_size, in_features...): a KernelBench file's one shape, by which
    its verdicts name it. Its inputs are built from the module as run, so a shape carries no other values."""
    return {name: value for name, value in constants.items() if type(value) is int}


def seed_from_reference(text: str) -> str:
    """A starting kernel that is the reference itself, self-contained so a model can rewrite it: the
    file as run, then a ModelNew that inherits everything from Model. The first experiment on it is to
    replace the forward's operations with Triton kernels."""
    return (text.rstrip("\n") + "\n\n\n"
            "class ModelNew(Model):\n"
            '    """The starting point: the reference Model itself, with no custom kernel yet. Replace the\n'
            '    forward\'s PyTorch operations with Triton kernels (or load_inline CUDA) to make it faster."""\n')


def _to_device(values, device):
    return tuple(v.to(device) if isinstance(v, torch.Tensor) else v for v in values)


def _description(module: ModuleType, stem: str) -> str:
    for doc in (module.__doc__, module.Model.__doc__):
        if doc and doc.strip():
            return doc.strip().splitlines()[0]
    return f"KernelBench problem {stem}"


def load_kernelbench_file(path: Path, overrides: dict) -> Problem:
    """A Problem whose entry is `ModelNew`, with the seeding convention described above."""
    path = Path(path)
    overrides = dict(overrides or {})
    module, text, names = _exec_source(path, overrides)
    constants = _constants(module, names)
    sizes = sizes_of(constants)

    def generate_input(seed: int, device="cuda", **shape):
        if any(sizes.get(name) != value for name, value in shape.items()):
            raise ProblemError(f"{path.name}: sizes come from module constants (use --set NAME=VALUE): "
                               f"{shape_label(sizes)}, not {shape_label(shape)}")
        with torch.random.fork_rng(devices=[]):  # leave the caller's RNG as it was
            torch.manual_seed(seed)
            inputs = module.get_inputs()
        return _to_device(inputs, device)

    def make_model(cls, seed: int = WEIGHTS_SEED, device="cpu"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            init_inputs = module.get_init_inputs()
            torch.manual_seed(seed)
            model = cls(*init_inputs)
        return model.to(device)

    reference_models: dict[str, torch.nn.Module] = {}  # built once per device, as KernelBench does

    def ref_kernel(data):
        device = next((str(v.device) for v in data if isinstance(v, torch.Tensor)), "cpu")
        if device not in reference_models:
            reference_models.clear()
            reference_models[device] = make_model(module.Model, WEIGHTS_SEED, device)
        with torch.no_grad():
            return reference_models[device](*data)

    return Problem(
        kind=KIND,
        name=path.stem,
        description=_description(module, path.stem),
        locator=str(path),
        generate_input=generate_input,
        ref_kernel=ref_kernel,
        rtol=TOLERANCE,
        atol=TOLERANCE,
        # One shape everywhere, named by its sizes: the module's integer constants as run.
        tests=[sizes],
        benchmarks=[sizes],
        cpu_tests=[sizes],
        cpu_benchmarks=[sizes],
        precision="fp32",
        overrides=overrides,
        seed_source=seed_from_reference(text),
        source_text=text,
        constants=constants,
        make_model=make_model,
        reference_model_class=module.Model,
        weights_seed=WEIGHTS_SEED,
    )


class KernelBenchKind(ProblemKind):
    name, title, entry = "kernelbench", "a KernelBench .py file", "ModelNew"
    call = "ModelNew(*get_init_inputs())(*data), with data = get_inputs()"
    builds_model = one_shape = True

    def claims(self, locator: str) -> bool:
        path = Path(locator).expanduser()
        return path.suffix == ".py" and path.is_file()

    def found(self, path: Path) -> bool:
        return self.claims(str(path)) and "class Model" in path.read_text(errors="replace")

    def load(self, locator: str, overrides: dict, probed: dict | None) -> Problem:
        return load_kernelbench_file(Path(locator).expanduser().resolve(), overrides)

    def settable(self, locator: str) -> dict[str, ast.stmt]:
        try:
            return module_constants(ast.parse(Path(locator).read_text()))
        except (OSError, SyntaxError, ValueError):
            return {}  # loading it will say what is wrong


KIND = KernelBenchKind()
