"""GPU MODE problem directories (the reference-kernels repository) as kscience Problems.

Such a directory holds `reference.py` with `generate_input(**spec)` and `ref_kernel(data)`,
where the spec is one entry of `task.yml`'s `tests:` or `benchmarks:` lists and includes
the random `seed`; `task.yml` may list helper files (`files:`, e.g. `task.py` and a shared
`../utils.py`) that the reference and submissions import by bare name; `submission.py`,
when present, is a working candidate and becomes the seed kernel.

Outputs as the task hands them out (see outputs.py): members of the data that `generate_input`
allocates empty or zeroed and never writes are outputs a kernel may fill and return (pmpp_v2,
amd-fp8-mm); every other tensor of the data must come back unchanged. A task whose `task.py`
declares a tuple, list or dict `output_t` is judged member by member: by its own
`check_implementation` where it has one, else by the reference's tolerances on each member.

Checks and tolerances are GPU MODE's: the task's `check_implementation` gets a copy of the data on
the task's device and the candidate's output moved there, as GPU MODE's eval.py gives it; a
`make_match_reference(ref_kernel, rtol=..., atol=...)` check becomes kscience's own comparison with
those tolerances (its `match_reference` defaults where none are given), which can sample big
outputs instead of reading them whole.

What kscience reads beyond GPU MODE's own keys, all optional in `task.yml`:
  `cpu_tests`, `cpu_benchmarks`: small shapes for the Triton interpreter (default: the
      smallest test shape);
  `output_args`: indices of preallocated outputs in the data tuple, where the automatic
      finding above is not enough;
  `config: {rtol, atol}`: tolerances, over the task's own.

What task.yml says is read in gpumode_task.py; this module runs the task's code. The Problem's
`generate_input`, `ref_kernel` and `check` are objects of the classes below: each holds what it needs,
named, rather than sharing the loader's variables.

On a machine without a GPU the reference's own code runs under `device_map.mapped_device`, so
tensors and generators it asks for on `'cuda'` are made on the CPU.

Directories that cannot run say why in one line: a task whose main is its own `eval.py` with
several entry points, one that runs on several GPUs at once (`multi_gpu`), one whose reference
imports a package that is not installed (aiter), one without `generate_input`; a reference that
fails on this device (an fp4 GEMM on a GPU without fp4) is a one-line ProblemError too.
"""

from __future__ import annotations

import contextlib
import copy
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from kscience.problems import capability, members, outputs
from kscience.problems.device_map import mapped_device, proxy_torch
from kscience.problems.files import import_file
from kscience.problems.gpumode_task import (declared_container, description, helper_files, match_reference_kwargs,
                                            read_task, refuse_unsupported, task_shapes, time_limit, tolerances)
from kscience.problems.kind import ProblemKind
from kscience.problems.spec import Problem, ProblemError, Shape, shape_label


def load_gpumode_dir(path: Path, overrides: dict, probed: dict | None = None) -> Problem:
    """A Problem from a GPU MODE directory; its `generate_input` takes kscience's (seed, device, **shape).
    `probed`: what an earlier load of the same directory found its outputs to be (`probed_facts`),
    so a worker need not run the probe again: on the meta device the task's random draws go through
    torch's decompositions, which import Dynamo, 1 s here and 3.4 s per evaluation on an H100 host."""
    folder = Path(path)
    if overrides:
        raise ProblemError("--set applies to KernelBench files; GPU MODE shapes come from task.yml")
    task_file, reference_file = folder / "task.yml", folder / "reference.py"
    if not (task_file.is_file() and reference_file.is_file()):
        raise ProblemError(f"{folder}: not a GPU MODE problem directory (needs task.yml and reference.py)")
    task = read_task(task_file)
    tests, benchmarks, cpu_tests, cpu_benchmarks = task_shapes(task, task_file)
    helpers = helper_files(folder, task)
    refuse_unsupported(folder, task, reference_file, helpers)
    module = _import_reference(folder, reference_file, helpers)
    container = declared_container(helpers)
    inputs = Inputs(module, reference_file)
    if probed is None:
        output_args, zeroed, several = _probe(task, task_file, cpu_tests[0], inputs, module, container is not None)
    else:
        output_args, zeroed = tuple(probed["output_args"]), tuple(probed["zeroed_outputs"])
        several = bool(probed["several_outputs"])
    reference = Reference(module, reference_file, folder.name, several)
    check = _check(task, module, reference, container)
    submission = folder / "submission.py"
    return Problem(
        kind=KIND,
        name=folder.name,
        description=description(task, module, folder.name),
        locator=str(folder),
        generate_input=inputs,
        ref_kernel=reference,
        rtol=check.rtol,
        atol=check.atol,
        tests=tests,
        benchmarks=benchmarks,
        cpu_tests=cpu_tests,
        cpu_benchmarks=cpu_benchmarks,
        output_args=output_args,
        zeroed_outputs=zeroed,
        several_outputs=several,
        call_data=inputs.call_data,
        seed_source=submission.read_text() if submission.is_file() else None,
        check=check if check.own or several else None,
        checks_alone=check.own is not None,
        time_limit_s=time_limit(task, task_file),
        source_text=shown_source(reference_file, helpers),
    )


def shown_source(reference_file: Path, helpers: list[tuple[str, Path]]) -> str:
    """What the scientist is shown as the reference: the task's reference.py, and its task.py (the input
    and output types) where the task has one; GPU MODE's own harness files (utils.py, eval.py) are not the task."""
    parts = [f"# reference.py\n{reference_file.read_text()}"]
    parts += [f"# {name}.py\n{file.read_text()}" for name, file in helpers if name == "task"]
    return "\n\n".join(parts)


def probed_facts(problem: Problem) -> dict:
    """What `_probe` found, as a judge sends it to its worker (`load_gpumode_dir(probed=...)`)."""
    return {"output_args": list(problem.output_args), "zeroed_outputs": list(problem.zeroed_outputs),
            "several_outputs": problem.several_outputs}


def _import_reference(folder: Path, reference_file: Path, helpers: list[tuple[str, Path]]) -> ModuleType:
    """The task's reference.py as a module, its helpers imported first. The reference and submissions say
    `from task import ...`, `from utils import ...`: the helpers stay registered under those bare names for
    candidates to import too."""
    for module_name, file in helpers:
        proxy_torch(import_file(file, module_name))
    safe_name = re.sub(r"\W", "_", folder.name)
    module = import_file(reference_file, f"kscience_gpumode_{safe_name}_reference")
    proxy_torch(module)
    missing = [n for n in ("generate_input", "ref_kernel") if not callable(getattr(module, n, None))]
    if missing:
        raise ProblemError(f"{folder.name}: cannot be evaluated: its reference.py has no {' or '.join(missing)} "
                           "(GPU MODE's harness for it is its own eval.py)")
    return module


class Inputs:
    """The task's `generate_input(**spec, seed)` as kscience's `generate_input(seed, device, **shape)`, and
    `call_data`, which hands the data to the candidate and the reference as the task made it."""

    def __init__(self, module: ModuleType, reference_file: Path):
        self.module, self.reference_file = module, reference_file
        # Set once generate_input has returned a bare tensor in this process: call_data then hands out
        # that tensor, not a tuple.
        self.bare = False

    def __call__(self, seed: int, device="cuda", **shape):
        return self.generate(seed, device, shape)[0]

    def generate(self, seed: int, device, shape: Shape) -> tuple:
        """(data, the output buffers the task's generate_input allocated for it: see outputs.buffers)."""
        try:
            # Tensors made without a device land on the target one; those made on 'cuda' explicitly
            # do too when the target is not a GPU (see device_map).
            # Some draw from the global generator too (bioml-trimul's weights): seeded here, so the
            # judge and the worker, each generating in its own process, get the same data.
            gpus = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []
            with torch.random.fork_rng(devices=gpus), torch.device(device), mapped_device(device), \
                    outputs.allocations() as made, _one_thread_on_cpu(device):
                torch.manual_seed(seed)
                data = self.module.generate_input(**shape, seed=seed)
                buffers = outputs.buffers(made, data)
        except Exception as exc:
            raise ProblemError(f"{self.reference_file}: generate_input({shape_label(shape)}) failed on "
                               f"{device}: {_first_line(exc)}") from None
        if isinstance(data, torch.Tensor):  # a bare tensor is one input, not a sequence of rows
            self.bare = True
            return (data.to(device),), buffers
        return members.map_tensors(data, lambda t: t.to(device)), buffers

    def call_data(self, data: list):
        return data[0] if self.bare else tuple(data)


@dataclass(frozen=True)
class Reference:
    """The task's `ref_kernel` as the judge calls it: on a copy of the data, its answer packed into one
    tensor where it returns several (see outputs.py)."""

    module: ModuleType
    file: Path
    folder_name: str
    several_outputs: bool  # what the probe found (or task.py declares where the probe could not run)

    def __call__(self, data):
        expected = self.run(data)
        if isinstance(expected, tuple) and type(expected) is not tuple:  # torch.linalg.qr's return type
            expected = tuple(expected)
        if outputs.is_structure(expected):
            if not self.several_outputs:
                raise ProblemError(f"{self.file}: ref_kernel returned {outputs.describe(expected)} on these "
                                   "inputs, one tensor on the smallest test's")
            members.check_members(expected, f"{self.file}: ref_kernel returned")
            return outputs.pack(expected)
        return expected

    def run(self, data):
        """The reference's own answer, unpacked. GPU MODE references may write their answer into a
        preallocated output in `data`, or update an object in it (a KV cache): they get a deep copy,
        as GPU MODE's check does."""
        device = _device_of(data)
        try:
            data = copy.deepcopy(data)
            # Under no_grad: a reference built from nn.Modules returns tensors that require grad,
            # which only slows it; the values are the same.
            with mapped_device(device), torch.no_grad():
                return members.map_tensors(self.module.ref_kernel(data), torch.Tensor.detach)
        except Exception as exc:
            why = capability.lacking(data, device)
            if why:
                raise ProblemError(f"{self.folder_name}: cannot be evaluated here: {why} "
                                   f"(its reference failed: {_first_line(exc)})") from None
            raise ProblemError(f"{self.file}: ref_kernel failed on {device}: {_first_line(exc)}") from None


@dataclass(frozen=True)
class Check:
    """GPU MODE's check of one output: the task's own on (copied data, the output on the data's device),
    else closeness to the reference's answer member by member."""

    reference: Reference
    own: Callable | None  # the task's check_implementation, where it is not make_match_reference's
    rtol: float
    atol: float
    container: str  # what a task with several outputs declares them in: "tuple", "list" or "dict"

    def __call__(self, data, output, answer=None):
        """None when right, else why; `answer` is ref_kernel's, computed now if not given."""
        device = _device_of(data)
        # A task may declare several outputs and return one tensor (amd-moe), unseen when the
        # probe could not run its reference: without an own check, the reference decides.
        several = self.reference.several_outputs
        got = outputs.unpack(output) if several and (self.own or outputs.is_packed(output)) else output
        if isinstance(got, str):
            return f"custom_kernel returned {got}, expected a {self.container} of tensors"
        got = members.map_tensors(got, lambda t: t.to(device))
        nan = members.nan_member(got)
        if nan:
            return nan
        if self.own:
            with mapped_device(device):
                verdict = self.own(copy.deepcopy(data), got)
            if isinstance(verdict, tuple):  # (ok, message)
                return None if verdict[0] else (str(verdict[1]) or "check_implementation failed")
            return str(verdict) if verdict else None  # GPU MODE's '' for a pass, a message otherwise
        try:
            if answer is None:
                answer = self.reference.run(data)
            elif outputs.is_packed(answer):
                answer = outputs.unpack(answer)
            return members.compare_members(got, answer, self.rtol, self.atol)
        except (MemoryError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and "alloc" not in str(exc):
                raise
            raise ProblemError(f"{self.reference.file}: comparing with the reference ran out of memory "
                               f"on {device}") from None


def _check(task: dict, module: ModuleType, reference: Reference, container: str | None) -> Check:
    """The task's check: its own check_implementation, unless that is make_match_reference's, which becomes
    kscience's comparison at its tolerances."""
    rtol, atol = tolerances(task, module)
    task_check = getattr(module, "check_implementation", None)
    own = task_check if callable(task_check) and match_reference_kwargs(task_check) is None else None
    return Check(reference, own, rtol, atol, container or "tuple")


def _probe(task: dict, task_file: Path, shape: Shape, inputs: Inputs, module: ModuleType,
           declared: bool) -> tuple[tuple, tuple, bool]:
    """(output indices, those handed out zeroed, whether the reference returns several tensors),
    from one generate_input and one ref_kernel call on `shape`, on the meta device (sizes without
    memory or arithmetic) where generate_input allows, else on the CPU. Outputs are the members
    generate_input allocated and left unwritten, and those the reference returns (having written
    them); task.yml's `output_args` overrides both. A task whose code runs nowhere here keeps what
    task.py declares (`declared`), and its failure comes back in one line when the judge asks for inputs.
    One call on the smallest test shape settles whether a task.yml that declares several outputs really
    returns several (some declare Tuple[Tensor, Dict] and return one tensor)."""
    given = task.get("output_args")
    if given is not None and (not isinstance(given, list) or not all(isinstance(i, int) for i in given)):
        raise ProblemError(f"{task_file}: `output_args` must be a list of data indices")
    output_args, zeroed, returned = (), (), None
    for device in ("meta", "cpu"):
        try:
            data, (output_args, zeroed) = inputs.generate(0, device, shape)
        except ProblemError:
            continue
        try:
            with torch.device(device), mapped_device(device), torch.no_grad():
                returned = module.ref_kernel(inputs.call_data(list(data)))
        except Exception:  # noqa: BLE001 - the judge meets the same failure and says so in one line
            pass  # (not retried on the CPU: amd-moe's reference takes minutes there)
        break
    else:
        return tuple(given or ()), (), declared
    if returned is not None:
        produced = {outputs.storage_key(t) for t in members.tensors(returned)} - {None}
        output_args += tuple(i for i, t in enumerate(data) if isinstance(t, torch.Tensor)
                             and i not in output_args and outputs.storage_key(t) in produced)
    if given is not None:
        output_args, zeroed = tuple(given), tuple(i for i in zeroed if i in given)
    several = outputs.is_structure(returned) if returned is not None else declared
    return tuple(sorted(output_args)), tuple(zeroed), several


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]


@contextlib.contextmanager
def _one_thread_on_cpu(device):
    """The judge and the worker must build bit-identical inputs, and they run with different torch
    thread counts: a CPU QR or matrix product (linalg-eigh's random orthogonal matrices) rounds
    differently with another count, and the worker's untouched input looked modified."""
    if torch.device(device).type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _device_of(data) -> str:
    found = []
    members.map_tensors(data, lambda t: found.append(t.device))
    if not found:  # tensors inside objects (a config, a cache module)
        for value in data if isinstance(data, (tuple, list)) else [data]:
            for t in vars(value).values() if hasattr(value, "__dict__") else []:
                if isinstance(t, torch.Tensor):
                    found.append(t.device)
            if hasattr(value, "buffers") and callable(value.buffers):
                found += [b.device for b in value.buffers()]
    return str(found[0]) if found else "cpu"


class GpuModeKind(ProblemKind):
    name, title = "gpumode", "a folder"

    def claims(self, locator: str) -> bool:
        return Path(locator).expanduser().is_dir()  # a folder that is no GPU MODE directory is told why on loading

    def found(self, path: Path) -> bool:
        return (path / "task.yml").is_file() and (path / "reference.py").is_file()

    def files(self, path: Path) -> list[Path]:
        # Hidden files (.git) and bytecode are not the problem's; the helpers task.yml names may lie beside it.
        inside = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()
                        and not any(part == "__pycache__" or part.startswith(".")
                                    for part in p.relative_to(path).parts))
        task = path / "task.yml"
        helpers = [f for _, f in helper_files(path, read_task(task))] if task.is_file() else []
        return list(dict.fromkeys([*inside, *(h.resolve() for h in helpers)]))

    def load(self, locator: str, overrides: dict, probed: dict | None) -> Problem:
        return load_gpumode_dir(Path(locator).expanduser().resolve(), overrides, probed)


KIND = GpuModeKind()
