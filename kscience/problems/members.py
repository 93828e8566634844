"""GPU MODE outputs judged member by member: a task's tuple, list or dict of tensors (or one tensor)
against the reference's, with GPU MODE's `verbose_allclose` rule (shape, dtype, then element-wise
closeness within rtol and atol; NaN never passes)."""

from __future__ import annotations

import torch

from kscience.problems import outputs
from kscience.problems.spec import ProblemError


def map_tensors(data, fn):
    """`fn` applied to every tensor in nested tuples, lists and dicts; the structure is kept."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, (tuple, list)):
        return type(data)(map_tensors(x, fn) for x in data)
    if isinstance(data, dict):
        return {k: map_tensors(v, fn) for k, v in data.items()}
    return data


def tensors(value) -> list:
    """Every tensor in nested tuples, lists and dicts, in order."""
    found = []
    map_tensors(value, found.append)
    return found


def check_members(value, what: str) -> None:
    _, _, members = outputs.members(value)
    bad = [type(m).__name__ for m in members if not isinstance(m, torch.Tensor)]
    if bad or not members:
        raise ProblemError(f"{what} {outputs.describe(value)} holding {', '.join(bad) or 'nothing'}; "
                           "kscience judges tensors")


def nan_member(got) -> str | None:
    """NaN never passes, whatever the reference says: unwritten outputs are NaN-poisoned."""
    _, _, members = outputs.members(got) if outputs.is_structure(got) else (0, [""], [got])
    for i, t in enumerate(members):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            nan = int(torch.isnan(t.float() if t.dtype.itemsize == 1 else t).sum())
            if nan:
                where = f"member {i}: " if outputs.is_structure(got) else ""
                return f"{where}{nan} of {t.numel()} output elements are NaN (unwritten or computed)"
    return None


def compare_members(got, expected, rtol: float, atol: float) -> str | None:
    """Each member of `got` close to the same member of `expected` (GPU MODE's verbose_allclose rule)."""
    if outputs.is_structure(expected) != outputs.is_structure(got) or \
            (outputs.is_structure(got) and len(got) != len(expected)):
        return f"custom_kernel returned {outputs.describe(got)}, expected {outputs.describe(expected)}"
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"custom_kernel returned keys {sorted(map(str, got))}, expected {sorted(expected)}"
        pairs = [(key, got[key], expected[key]) for key in expected]
    elif outputs.is_structure(got):
        pairs = [(i, out, want) for i, (out, want) in enumerate(zip(got, expected))]
    else:
        pairs = [(None, got, expected)]
    for key, out, want in pairs:
        where = f"member {key}: " if key is not None else ""
        if tuple(out.shape) != tuple(want.shape):
            return f"{where}output shape {tuple(out.shape)}, expected {tuple(want.shape)}"
        if out.dtype != want.dtype:
            return f"{where}output dtype {out.dtype}, expected {want.dtype}"
        a, b = out.double(), want.to(out.device).double()
        close = torch.isclose(a, b, rtol=rtol, atol=atol)
        if not bool(close.all()):
            bad = int((~close).sum())
            idx = tuple(int(j) for j in torch.nonzero(~close)[0])
            return (f"{where}{bad} of {a.numel()} elements outside rtol={rtol}, atol={atol}; "
                    f"first at {idx}: got {float(a[idx]):.6g}, expected {float(b[idx]):.6g}")
    return None
