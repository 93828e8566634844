"""Is a candidate's output right? Decided in the trusted process only.

Big tensors are not always read back whole. The output of the checked call is, always. A
second look at it and at the inputs the candidate must not write, and the outputs of timed
calls, are compared on byte ranges the judge draws after the call has returned: the whole
tensor when it is small, else a fixed number of random 64 KiB blocks (CHECK_BLOCKS for a
checked call's second look, TIMED_CALL_BLOCKS for each of the dozen or so timed calls read
per shape). A call that skipped, left unfinished, cached or overwrote a share f of a tensor
escapes one read of k blocks with probability (1 - f)^k: under 20% for f = 5% and k = 32,
and a shape's dozen reads almost never. A change confined to a few blocks can slip through,
which is why the checked call's output is always compared in full.
"""

from __future__ import annotations

import secrets

import torch

BLOCK_BYTES = 64 * 2**10
CHECK_BLOCKS = 64  # 4 MiB per tensor for a checked call's second look
TIMED_CALL_BLOCKS = 32  # 2 MiB per timed-call read: the channel carries about 1 GB/s
_random = secrets.SystemRandom()


def sample_ranges(nbytes: int, blocks: int | None = None) -> list[list[int]]:
    """[offset, length] byte ranges to compare, drawn from the OS's randomness: every byte of a
    tensor of at most `blocks` blocks (CHECK_BLOCKS unless given), else `blocks` distinct blocks."""
    blocks = blocks or CHECK_BLOCKS
    if nbytes <= blocks * BLOCK_BYTES:
        return [[0, nbytes]] if nbytes else []
    n_blocks = -(-nbytes // BLOCK_BYTES)
    picked = sorted(_random.sample(range(n_blocks), blocks))
    return [[b * BLOCK_BYTES, min(BLOCK_BYTES, nbytes - b * BLOCK_BYTES)] for b in picked]


def gather(t: torch.Tensor, ranges: list[list[int]]) -> torch.Tensor:
    """The bytes of `t` at `ranges`, as one flat uint8 tensor on t's device."""
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    return torch.cat([flat[o:o + n] for o, n in ranges]) if ranges else flat[:0]


def check_output(out: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> tuple[bool, str, float]:
    """(ok, one-line reason, max |out - expected|). NaN never passes, whatever the reference says."""
    if tuple(out.shape) != tuple(expected.shape):
        return False, f"output shape {tuple(out.shape)}, expected {tuple(expected.shape)}", float("inf")
    if out.dtype != expected.dtype:
        return False, f"output dtype {out.dtype}, expected {expected.dtype}", float("inf")
    got, want = out.to(expected.device).double(), expected.double()
    nan = torch.isnan(got)
    if nan.any():
        return False, f"{int(nan.sum())} of {got.numel()} output elements are NaN (unwritten or computed)", float("inf")
    close = torch.isclose(got, want, rtol=rtol, atol=atol)
    err = (got - want).abs()
    max_err = float(err.max()) if err.numel() else 0.0
    if not bool(close.all()):
        bad = int((~close).sum())
        idx = tuple(int(i) for i in torch.nonzero(~close)[0])
        return (False, f"{bad} of {got.numel()} elements outside rtol={rtol}, atol={atol}; "
                       f"first at {idx}: got {float(got[idx]):.6g}, expected {float(want[idx]):.6g}", max_err)
    return True, "", max_err


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe): inputs the candidate may not write must come back untouched."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.contiguous(), b.to(a.device).contiguous()
    if a.numel() == 0:
        return True
    return bool(torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
