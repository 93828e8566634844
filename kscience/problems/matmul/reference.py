"""Dense bf16 matrix product C = A @ B with fp32 accumulation, all row-major.

The kernel every GPU generation is tuned for first (Triton tutorial 03): compute-bound at
large sizes, where the score is how close a kernel gets to the tensor-core peak.
"""

import torch

from kscience.problems.libraries import GEMM_CALLS

DESCRIPTION = "bf16 GEMM C = A @ B (A M x K, B K x N, row-major), fp32 accumulation, bf16 output"
PRECISION = "bf16"

# B is drawn with variance 1/K so every entry of C is about N(0, 1) whatever K is. The
# products of bf16 inputs are exact in fp32, so correct kernels differ only by summation
# order and by one bf16 rounding of C (one ulp is at most 2**-7 relative).
RTOL = 2e-2
ATOL = 2e-2

BENCHMARKS = [{"m": 4096, "n": 4096, "k": 4096}, {"m": 8192, "n": 8192, "k": 8192},
              {"m": 1024, "n": 8192, "k": 4096}, {"m": 8192, "n": 1024, "k": 8192}]
TESTS = [{"m": 64, "n": 64, "k": 64}, {"m": 129, "n": 257, "k": 320}, {"m": 100, "n": 300, "k": 72},
         {"m": 1000, "n": 1000, "k": 1000}, {"m": 256, "n": 4096, "k": 4096}]
CPU_TESTS = [{"m": 64, "n": 64, "k": 64}, {"m": 129, "n": 257, "k": 320}, {"m": 100, "n": 300, "k": 72}]
CPU_BENCHMARKS = [{"m": 256, "n": 256, "k": 512}]


def generate_input(seed: int, device="cuda", *, m: int, n: int, k: int):
    """(a, b): a [m, k] and b [k, n], bf16, row-major."""
    # Drawn on the evaluation device: host-side generation of GPU-sized inputs would dominate
    # an evaluation. The numbers for a seed are the same on every device of one kind.
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)  # [m, k]
    b = (torch.randn(k, n, generator=gen, device=device) * k ** -0.5).to(torch.bfloat16)  # [k, n]
    return a, b


def ref_kernel(data):
    a, b = data
    return (a.float() @ b.float()).to(a.dtype)  # [m, n]


def eager_kernel(data):
    a, b = data
    return a @ b  # [m, n]: cuBLAS in bf16 with fp32 accumulation


VENDOR = "cuBLAS bf16 GEMM (torch.mm)"
# The vendor path is cuBLAS: no candidate may call it under any of its names (torch.mm, `@` on tensors,
# F.linear, einsum...: GEMM_CALLS), so a kernel
# reported as the model's is never cuBLAS's.
LIBRARY_CALLS = "forbidden"
FORBIDDEN_CALLS = GEMM_CALLS


def vendor_kernel(data):
    a, b = data
    return torch.mm(a, b)  # [m, n]: what eager calls too; named apart as the library a user would pick


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def bytes_moved(m: int, n: int, k: int) -> float:
    return 2.0 * (m * k + k * n + m * n)  # read A and B, write C, all bf16
