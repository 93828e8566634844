"""Will a problem's largest shape fit this machine? Sized on PyTorch's meta device, so no memory is
taken; `kscience campaign` skips a problem that would not fit and `kscience eval` refuses it, both
with the same one line, which names the sizes `--set NAME=VALUE` can shrink in a KernelBench file."""

from __future__ import annotations

import ast
import os

import torch

from kscience.problems.device_map import mapped_device

# What a problem needs at once, as a multiple of one input set plus one output: the judge's copy
# and the worker's, the pristine inputs kept for the unchanged-input check, and the reference output.
MEMORY_FACTOR = 4
FREE_SHARE = 0.9  # of the memory free when it is asked


def _tensor_bytes(data) -> int:
    if isinstance(data, torch.Tensor):
        return data.numel() * data.element_size()
    if isinstance(data, (tuple, list)):
        return sum(_tensor_bytes(x) for x in data)
    if isinstance(data, dict):
        return sum(_tensor_bytes(x) for x in data.values())
    return 0


def needed_bytes(problem, interpreted: bool) -> int | None:
    """Memory the largest benchmark shape needs at once, estimated on PyTorch's meta device (no memory
    is taken); None when the problem's input builder cannot run there."""
    largest = 0
    for shape in problem.shapes("all", interpreted):
        try:
            with torch.device("meta"), mapped_device("meta"):
                data = problem.generate_input(0, "meta", **shape)
                out = problem.ref_kernel(data)
        except Exception:  # an op without a meta kernel, a generator on meta: no estimate
            return None
        largest = max(largest, MEMORY_FACTOR * _tensor_bytes(data) + _tensor_bytes(out))
    return largest


def free_bytes(interpreted: bool) -> int | None:
    if not interpreted and torch.cuda.is_available():
        return torch.cuda.mem_get_info()[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def size_hint(problem) -> str:
    """The integer constants `--set NAME=VALUE` can lower (a KernelBench file's); else nothing."""
    sizes = []
    for name, node in problem.kind.settable(problem.locator).items():
        value = problem.overrides.get(name)
        if value is None:
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError):  # an expression, not a literal
                continue
        if str(value).isdigit():
            sizes.append(f"{name}={value}")
    return f"; make it smaller with --set NAME=VALUE (its sizes: {', '.join(sizes)})" if sizes else ""


def fit_reason(problem, device) -> str | None:
    """Why the problem cannot run on this device, or None when it can (or cannot be told)."""
    need = needed_bytes(problem, device.interpreted)
    free = free_bytes(device.interpreted)
    if need is None or free is None or need <= FREE_SHARE * free:
        return None
    where = "host memory" if device.interpreted else f"{device.name} memory"
    return (f"does not fit: needs about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB of {where} free"
            f"{size_hint(problem)}")
