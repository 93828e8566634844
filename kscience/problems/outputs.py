"""Outputs as GPU MODE tasks hand them out: preallocated in `data`, or several tensors at once.

Two ideas, one for each side of an evaluation:

* `allocations(fn)` runs a task's `generate_input` and notes which members of the data it returns
  are buffers it allocated (`torch.empty*`, `torch.zeros*`, `new_empty`, `new_zeros`) and never
  wrote afterwards: outputs the task hands a kernel to fill (pmpp_v2's `output`, amd-fp8-mm's `c`).
  Those allocated empty hold nothing a kernel may rely on; those allocated zeroed hold zeros it
  may rely on (a kernel that accumulates into `c`).

* `pack(out)` turns a tuple, list or dict of tensors, as a candidate returns it, into one flat
  uint8 tensor on the same device: a header of int64 words (a marker, the container's kind, and
  each member's dtype, shape and dict key), then each member's bytes, 16-byte aligned. The
  evaluator moves, samples and compares one tensor per call; `unpack` gives the structure back in
  the trusted process, which then judges it member by member. `unpack` trusts nothing in the
  header: a malformed one is a one-line reason, never an exception.

Tensor methods are bound here, through the class, before any candidate runs (see harness.py).
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

MARKER = 0x6B73_6369_6F75_7473  # "kscioutsf": the first word of a packed output
KINDS = (tuple, list, dict)
ALIGN = 16
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
          torch.float8_e5m2fnuz, torch.uint16, torch.uint32, torch.uint64, torch.complex64)
_DTYPE_CODE = {dtype: i for i, dtype in enumerate(DTYPES)}
MAX_MEMBERS, MAX_DIMS, MAX_KEY = 64, 8, 256
HEADER_BYTES = 8 * (3 + MAX_MEMBERS * (3 + MAX_DIMS + MAX_KEY // 8))  # the longest header `pack` writes

_Tensor = torch.Tensor
_type = type
_contiguous, _reshape, _view = torch.Tensor.contiguous, torch.Tensor.reshape, torch.Tensor.view
_to, _numel, _element_size = torch.Tensor.to, torch.Tensor.numel, torch.Tensor.element_size
_dim = torch.Tensor.dim
_cat, _zeros, _tensor = torch.cat, torch.zeros, torch.tensor


def is_structure(out) -> bool:
    """A tuple (or a tuple subclass such as torch.linalg.qr's return type), list or dict."""
    return _type(out) in KINDS or isinstance(out, tuple)


def members(out) -> tuple[int, list[str], list]:
    """(kind index, keys, values) of a tuple, list or dict, in its own order. A dict's keys must be
    plain strings: anything else could run the candidate's code (`__str__`, `__hash__`) once a
    timed call's clocks have stopped; such a key is given as None, which the harness refuses."""
    if _type(out) not in KINDS:  # a tuple subclass: read through tuple's own C methods, no code of its
        return 0, [""] * tuple.__len__(out), [tuple.__getitem__(out, i) for i in range(tuple.__len__(out))]
    kind = KINDS.index(_type(out))
    if kind == 2:
        keys = [k if _type(k) is str else None for k in dict.keys(out)]
        return kind, keys, [dict.__getitem__(out, k) for k in dict.keys(out)]
    return kind, [""] * len(out), list(out)


def pack(out) -> torch.Tensor:
    """One uint8 tensor holding a structure of tensors (checked by the caller: plain, dense, one device)."""
    kind, keys, values = members(out)
    words = [MARKER, kind, len(values)]
    for key, t in zip(keys, values):
        raw = key.encode()[:MAX_KEY]
        raw += b"\0" * (-len(raw) % 8)
        words += [_DTYPE_CODE[t.dtype], _dim(t), *t.shape, len(raw) // 8]
        words += [int.from_bytes(raw[i:i + 8], "little", signed=True) for i in range(0, len(raw), 8)]
    device = values[0].device
    header = _view(_tensor(words, dtype=torch.int64), torch.uint8)
    parts = [_to(header, device)]
    for t in values:
        flat = _view(_reshape(_contiguous(t), -1), torch.uint8) if _numel(t) else _zeros(0, dtype=torch.uint8, device=device)
        parts.append(flat)
        pad = -(_numel(flat)) % ALIGN
        if pad:
            parts.append(_zeros(pad, dtype=torch.uint8, device=device))
    pad = -(_numel(parts[0])) % ALIGN
    if pad:
        parts.insert(1, _zeros(pad, dtype=torch.uint8, device=device))
    return _cat(parts)


def is_packed(t: torch.Tensor) -> bool:
    return (t.dtype == torch.uint8 and t.dim() == 1 and t.numel() >= 24
            and int(t[:8].cpu().view(torch.int64)[0]) == MARKER)


def unpack(t: torch.Tensor):
    """The structure `pack` made, or a one-line reason why these bytes are not one."""
    if not is_packed(t):
        return "a single tensor"
    # Only the header is read into Python: the members stay where they are (a GPU), and an
    # eigendecomposition of 640 matrices of 512 x 512 is 84 million words that would be listed.
    raw = t[:min(t.numel(), HEADER_BYTES)].detach().cpu()
    n_words = raw.numel() // 8
    words = raw[:n_words * 8].view(torch.int64).tolist()
    kind, n = words[1], words[2]
    if not (0 <= kind < len(KINDS) and 0 < n <= MAX_MEMBERS):
        return "a malformed packed output"
    at, specs = 3, []
    for _ in range(n):
        if at + 2 > len(words):
            return "a malformed packed output"
        code, ndim = words[at], words[at + 1]
        if not (0 <= code < len(DTYPES) and 0 <= ndim <= MAX_DIMS and at + 3 + ndim <= len(words)):
            return "a malformed packed output"
        shape = words[at + 2:at + 2 + ndim]
        key_words = words[at + 2 + ndim]
        if any(d < 0 for d in shape) or not (0 <= key_words <= MAX_KEY // 8) or at + 3 + ndim + key_words > len(words):
            return "a malformed packed output"
        key_bytes = b"".join(w.to_bytes(8, "little", signed=True) for w in words[at + 3 + ndim:at + 3 + ndim + key_words])
        specs.append((DTYPES[code], shape, key_bytes.rstrip(b"\0").decode(errors="replace")))
        at += 3 + ndim + key_words
    offset = at * 8 + (-(at * 8) % ALIGN)
    values = []
    for dtype, shape, _ in specs:
        count = 1
        for d in shape:
            count *= d
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        if offset + nbytes > t.numel():
            return "a malformed packed output (shorter than its header says)"
        values.append(t[offset:offset + nbytes].view(dtype).reshape(shape) if nbytes else
                      torch.empty(shape, dtype=dtype, device=t.device))
        offset += nbytes + (-nbytes % ALIGN)
    if KINDS[kind] is dict:
        return {key: v for (_, _, key), v in zip(specs, values)}
    return KINDS[kind](values)


def describe(out) -> str:
    """'a tuple of 2 tensors', 'a dict of 3 tensors', 'a single tensor': for messages."""
    if isinstance(out, torch.Tensor):
        return "a single tensor"
    return f"a {type(out).__name__} of {len(out)} tensors"


# --- generate_input's own buffers ---------------------------------------------------------
_ALLOCATORS = {torch.empty: False, torch.empty_like: False, torch.empty_strided: False,
               torch.Tensor.new_empty: False, torch.zeros: True, torch.zeros_like: True,
               torch.Tensor.new_zeros: True}
_NOT_WRITES = {torch.Tensor.__getitem__}


def storage_key(t: torch.Tensor):
    """Which storage a tensor views (views share it); stable on the meta device too, which has no
    addresses. None for an empty tensor."""
    if _numel(t) == 0:
        return None
    return (t.device, t.untyped_storage()._cdata)


class _Allocations(TorchFunctionMode):
    """Notes the storages made by empty/zeros allocators and forgets those written afterwards."""

    def __init__(self):
        super().__init__()
        self.fresh: dict = {}  # storage key -> True when zeroed

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func in _ALLOCATORS and isinstance(result, torch.Tensor):
            key = storage_key(result)
            if key is not None:
                self.fresh[key] = _ALLOCATORS[func]
            return result
        targets = []
        name = getattr(func, "__name__", "")
        if args and isinstance(args[0], torch.Tensor) and func not in _NOT_WRITES and (
                (name.endswith("_") and not name.endswith("__")) or name == "__setitem__"):
            targets.append(args[0])
        out = kwargs.get("out")
        targets += [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]
        for t in targets:
            self.fresh.pop(storage_key(t), None)
        return result


@contextlib.contextmanager
def allocations():
    """Within the block, record empty/zeroed allocations; yields the recorder for `buffers`."""
    mode = _Allocations()
    with mode:
        yield mode


def buffers(recorder: _Allocations, data) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(indices of data members that are untouched allocations, those of them allocated zeroed)."""
    if not isinstance(data, (tuple, list)):
        return (), ()
    found, zeroed = [], []
    for i, t in enumerate(data):
        if isinstance(t, torch.Tensor):
            key = storage_key(t)
            if key in recorder.fresh:
                found.append(i)
                if recorder.fresh[key]:
                    zeroed.append(i)
    return tuple(found), tuple(zeroed)
