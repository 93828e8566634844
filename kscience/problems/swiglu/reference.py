"""SwiGLU feed-forward gate: out = silu(x @ w_gate) * (x @ w_up), in the style of KernelBench level 2.

Two GEMMs that share their left operand, and an elementwise epilogue. Done naively that is
two full GEMMs plus three passes over M x N intermediates; fused, x is read once per tile,
both products accumulate side by side and only the bf16 result is written.
"""

import torch

from kscience.problems.libraries import GEMM_CALLS, liger, require

DESCRIPTION = "fused SwiGLU: silu(x @ w_gate) * (x @ w_up), x M x K, weights K x N, bf16"
PRECISION = "bf16"

# Weights are drawn with variance 1/K, so both products are about N(0, 1). Correct kernels
# differ by summation order and by bf16 rounding of the output (one ulp is 2**-7 relative);
# a kernel that rounds the two products to bf16 before the epilogue still passes.
RTOL = 2e-2
ATOL = 2e-2

BENCHMARKS = [{"m": 4096, "k": 4096, "n": 14336}, {"m": 8192, "k": 4096, "n": 14336},
              {"m": 2048, "k": 8192, "n": 28672}, {"m": 512, "k": 7168, "n": 2048}]
TESTS = [{"m": 64, "k": 64, "n": 64}, {"m": 129, "k": 320, "n": 257}, {"m": 100, "k": 72, "n": 300},
         {"m": 1000, "k": 1024, "n": 1000}, {"m": 256, "k": 4096, "n": 14336}]
CPU_TESTS = [{"m": 64, "k": 64, "n": 64}, {"m": 129, "k": 320, "n": 257}, {"m": 100, "k": 72, "n": 300}]
CPU_BENCHMARKS = [{"m": 256, "k": 512, "n": 256}]


def generate_input(seed: int, device="cuda", *, m: int, k: int, n: int):
    """(x, w_gate, w_up): x [m, k], w_gate [k, n], w_up [k, n], bf16, row-major."""
    # Drawn on the evaluation device: host-side generation of GPU-sized inputs would dominate
    # an evaluation. The numbers for a seed are the same on every device of one kind.
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)  # [m, k]
    w_gate = (torch.randn(k, n, generator=gen, device=device) * k ** -0.5).to(torch.bfloat16)  # [k, n]
    w_up = (torch.randn(k, n, generator=gen, device=device) * k ** -0.5).to(torch.bfloat16)  # [k, n]
    return x, w_gate, w_up


def ref_kernel(data):
    x, w_gate, w_up = data
    gate = x.float() @ w_gate.float()  # [m, n]
    up = x.float() @ w_up.float()  # [m, n]
    return (torch.nn.functional.silu(gate) * up).to(x.dtype)  # [m, n]


def eager_kernel(data):
    x, w_gate, w_up = data
    return torch.nn.functional.silu(x @ w_gate) * (x @ w_up)  # [m, n]: two bf16 GEMMs, then the epilogue


def flops(m: int, k: int, n: int) -> float:
    return 2 * 2.0 * m * n * k  # two GEMMs; the epilogue is negligible


def bytes_moved(m: int, k: int, n: int) -> float:
    return 2.0 * (m * k + 2 * k * n + m * n)  # read x and both weights, write out, all bf16


# What a user would install instead: Liger's SwiGLU MLP runs both projections through cuBLAS and fuses
# only silu(gate) * up. No candidate may call Liger, nor cuBLAS's GEMMs (torch.mm, `@`, F.linear...: GEMM_CALLS):
# a kernel of the model's is the fused one the problem asks for, never the baseline's.
LIBRARY_CALLS = "forbidden"
FORBIDDEN_CALLS = GEMM_CALLS
LIBRARIES = [liger("SwiGLU", "kscience.problems.swiglu.reference:liger_swiglu", "liger_kernel.ops.swiglu",
                   why="LinkedIn's Triton kernels for LLM training: LigerSwiGLUMLP's two cuBLAS GEMMs, then its "
                       "fused silu(gate) * up")]


def liger_swiglu(data):
    """What LigerSwiGLUMLP does without its down projection: gate and up by cuBLAS, then
    liger_kernel.ops.swiglu.LigerSiLUMulFunction."""
    ops = require("liger_kernel.ops.swiglu", "liger-kernel")
    x, w_gate, w_up = data
    return ops.LigerSiLUMulFunction.apply(x @ w_gate, x @ w_up)  # [m, n]
