"""A correct Triton `ModelNew` for kernelbench_gemm_multiply_leakyrelu.py: the GEMM stays in cuBLAS,
the multiply and LeakyReLU are fused in one pass over the output (the scripted model's answer)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 128


@triton.jit
def scale_leaky_relu_kernel(x_ptr, y_ptr, n, multiplier, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask) * multiplier
    tl.store(y_ptr + offs, tl.where(x >= 0, x, x * slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        x = self.gemm(x).contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale_leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, self.multiplier, self.negative_slope,
                                                          BLOCK=BLOCK)
        return y
