"""Row softmax in two launches (a row-max kernel, then the normalising kernel), printing a
fallback note: a candidate whose per-kernel split and own output the judge must report."""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def row_max_kernel(m_ptr, x_ptr, stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    tl.store(m_ptr + row, tl.max(x, axis=0))


@triton.jit
def normalise_kernel(y_ptr, x_ptr, m_ptr, x_stride, y_stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.load(m_ptr + row))
    tl.store(y_ptr + row * y_stride + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=cols < N)


def custom_kernel(data):
    (x,) = data
    M, N = x.shape
    print("TMA unavailable, falling back to pointer loads", file=sys.stderr)
    m = torch.empty(M, device=x.device, dtype=torch.float32)
    y = torch.empty_like(x)
    block = triton.next_power_of_2(N)
    row_max_kernel[(M,)](m, x, x.stride(0), N, BLOCK_N=block)
    normalise_kernel[(M,)](y, x, m, x.stride(0), y.stride(0), N, BLOCK_N=block)
    return y
