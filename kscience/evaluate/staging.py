"""A timed call's inputs, staged by the judge (both sides): the judge builds them in its own process and
writes their bytes into its own buffer inside its clock; the worker copies them into the fixed buffers
the candidate sees.

Building a call's inputs can be slow and uneven (a KernelBench file builds its tensors on the CPU with
`torch.randn`, hundreds of milliseconds for a large GEMM; GPU MODE's sort builds rows from Python),
and a build inside the judge's clock would blur its estimate of the call by as much. Built before the
clock and outside the worker, the inputs still reach the worker only inside the clock, as new content
the candidate cannot have seen: the judge writes them into its buffer after starting its clock, and
the worker's copy into the fixed buffers is plain bytes of known size, the same for every call and
every candidate of a shape, null calls included.

The data is walked in a fixed order (`leaves`): top-level members, then the items of lists and tuples
and the values of dicts inside them, three levels deep. A shape can be staged when every tensor of its
data is a plain dense tensor on the evaluation device within those containers, and the data's form
(`skeleton`: containers, scalars, and each tensor's dtype, shape and strides) is the same for every
seed; otherwise its calls are built by the worker from a seed, inside the clock (`stageable`).
"""

from __future__ import annotations

import torch

ALIGN = 256  # each staged tensor starts at a multiple of this many bytes (any dtype views it)
DEPTH = 3  # containers inside a member, as deep as the harness restores them (worker/harness.py)


def leaves(data, outputs=()) -> list[torch.Tensor]:
    """The tensors of `data` in staging order, less the members in `outputs` (poisoned by the worker
    before every call, never written by the judge)."""
    found: list[torch.Tensor] = []
    for i, member in enumerate(data):
        if i not in outputs:
            _walk(member, 0, found)
    return found


def _walk(x, depth: int, found: list) -> None:
    if isinstance(x, torch.Tensor):
        found.append(x)
    elif depth < DEPTH and isinstance(x, (list, tuple)):
        for item in x:
            _walk(item, depth + 1, found)
    elif depth < DEPTH and isinstance(x, dict):
        for value in x.values():
            _walk(value, depth + 1, found)


def skeleton(x, depth: int = 0):
    """The form of `x`: containers and scalars as they are, tensors by dtype, shape, strides and device
    type. Two seeds of one shape that give the same skeleton differ only in tensor contents. None
    where `x` holds something the staging order does not reach (an object, a container too deep)."""
    if type(x) is torch.Tensor:
        if x.layout != torch.strided:
            return None
        return ("tensor", str(x.dtype), tuple(x.shape), tuple(x.stride()), x.device.type)
    if isinstance(x, (bool, int, float, str, bytes, type(None))):
        return ("value", type(x).__name__, x)
    if isinstance(x, torch.Tensor) or depth >= DEPTH:
        return None  # a tensor subclass, or a container beyond the staging order
    if isinstance(x, (list, tuple)):
        items = [skeleton(item, depth + 1) for item in x]
        return None if None in items else (type(x).__name__, tuple(items))
    if isinstance(x, dict):
        items = [(k, skeleton(v, depth + 1)) for k, v in x.items()]
        return None if any(s is None for _, s in items) else ("dict", tuple(items))
    return None


def stageable(data, device_type: str) -> tuple[object, str]:
    """(the data's skeleton, "") where its calls can be staged, else (None, why not)."""
    form = tuple(skeleton(member) for member in data)
    if None in form:
        return None, "its inputs hold objects the judge does not copy member by member"
    tensors = leaves(data)
    if any(t.device.type != device_type for t in tensors):
        return None, f"some of its input tensors are not on {device_type}"
    if not all(_apart(t) for t in tensors):
        return None, "an input tensor has elements that share memory (an expanded view)"
    return form, ""


def _apart(t: torch.Tensor) -> bool:
    """Whether no two elements of `t` share memory: its strides, sorted, each step past the last dimension."""
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size > 1)
    reach = 1
    for stride, size in dims:
        if stride < reach:
            return False
        reach = stride * size
    return True


def span_bytes(t: torch.Tensor) -> int:
    """The bytes from `t`'s first element to its last, as its strides lay them out."""
    if t.numel() == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()


def places(tensors: list[torch.Tensor]) -> list[list[int]]:
    """[offset, span in bytes] of each tensor in the staging buffer, each at a multiple of ALIGN."""
    out, offset = [], 0
    for t in tensors:
        n = span_bytes(t)
        out.append([offset, n])
        offset += -(-n // ALIGN) * ALIGN
    return out


def size_of(at: list[list[int]]) -> int:
    return max((o + n for o, n in at), default=0)


def views(mapping, at: list[list[int]], like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors of `like`'s dtypes, shapes and strides over a shared buffer (`mapping`, shared_buffer.py)
    at `at` (both sides), each with storage of its own that starts at its first element: the candidate
    sees what a freshly built input has, storage offset 0 included."""
    return [_as_strided(_view(mapping.at(offset, span), t.dtype), tuple(t.shape), tuple(t.stride()), 0)
            for (offset, span), t in zip(at, like)]


def write(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """Each source copied into its view (the judge's side, inside its clock)."""
    for target, source in zip(targets, sources):
        _copy(target, source)


def replace_leaves(data: list, new: list[torch.Tensor], outputs=()) -> list:
    """`data` with its tensors (in staging order, less `outputs`) replaced by `new`, containers rebuilt."""
    it = iter(new)

    def swap(x, depth: int):
        if isinstance(x, torch.Tensor):
            return next(it)
        if depth < DEPTH and isinstance(x, (list, tuple)):
            return type(x)(swap(item, depth + 1) for item in x)
        if depth < DEPTH and isinstance(x, dict):
            return {k: swap(v, depth + 1) for k, v in x.items()}
        return x

    return [member if i in outputs else swap(member, 0) for i, member in enumerate(data)]


def rebuild(x, depth: int = 0):
    """New containers around the same tensors (and scalars): what a call changes in them stays with it."""
    if depth < DEPTH and isinstance(x, (list, tuple)):
        return type(x)(rebuild(item, depth + 1) for item in x)
    if depth < DEPTH and isinstance(x, dict):
        return {k: rebuild(v, depth + 1) for k, v in x.items()}
    return x


_copy, _view, _as_strided = torch.Tensor.copy_, torch.Tensor.view, torch.as_strided
