"""RMS normalisation of each row: y = x / sqrt(mean(x**2) + eps) * weight.

The normalisation used in Llama-style transformers. Memory-bound: a kernel reads x and the
weight once and writes y once, so the score is how close it gets to the memory bandwidth.
"""

import torch

from kscience.problems.libraries import liger, quack, require, require_sm90

DESCRIPTION = "RMSNorm of an M x N bf16 matrix with a bf16 weight of length N, eps 1e-6"
PRECISION = "fp32"
EPS = 1e-6

# One bf16 rounding of the output (one ulp is at most 2**-7 relative) is all that separates
# two correct fp32 computations; a mean taken over a padded row length is 1-2% off and fails.
RTOL = 1e-2
ATOL = 1e-3

BENCHMARKS = [{"m": 8192, "n": 4096}, {"m": 16384, "n": 8192}, {"m": 4096, "n": 7168},
              {"m": 32768, "n": 2048}]
TESTS = [{"m": 1, "n": 64}, {"m": 17, "n": 1000}, {"m": 128, "n": 4096},
         {"m": 64, "n": 7168}, {"m": 3, "n": 5120}]
CPU_TESTS = [{"m": 1, "n": 64}, {"m": 17, "n": 1000}, {"m": 8, "n": 7168}]
CPU_BENCHMARKS = [{"m": 256, "n": 2048}]


def generate_input(seed: int, device="cuda", *, m: int, n: int):
    """(x, weight): x [m, n] and weight [n], both bf16."""
    # Drawn on the evaluation device: host-side generation of GPU-sized inputs would dominate
    # an evaluation. The numbers for a seed are the same on every device of one kind.
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, n, generator=gen, device=device).to(torch.bfloat16)  # [m, n]
    weight = (1.0 + 0.5 * torch.randn(n, generator=gen, device=device)).to(torch.bfloat16)  # [n]
    return x, weight


def ref_kernel(data):
    x, weight = data
    x32 = x.float()  # [m, n]
    inv_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + EPS)  # [m, 1]
    return (x32 * inv_rms * weight.float()).to(x.dtype)  # [m, n]


def eager_kernel(data):
    x, weight = data
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, EPS)  # [m, n]


def flops(m: int, n: int) -> float:
    # square and add for the sum, then scale by 1/rms and by the weight
    return 4.0 * m * n


def bytes_moved(m: int, n: int) -> float:
    return 2.0 * (2 * m * n + n)  # read x and weight, write y, all bf16


# What a user would install instead; no candidate may call them (nor their packages), nor PyTorch's own
# RMSNorm under any of its names (eager_kernel's op), so a kernel reported as the model's is never the library's.
LIBRARY_CALLS = "forbidden"
FORBIDDEN_CALLS = ("torch.rms_norm", "torch.nn.functional.rms_norm", "torch.nn.RMSNorm", "torch._fused_rms_norm")
LIBRARIES = [liger("RMSNorm", "kscience.problems.rmsnorm.reference:liger_rmsnorm", "liger_kernel.ops.rms_norm"),
             quack("RMSNorm", "kscience.problems.rmsnorm.reference:quack_rmsnorm")]


def liger_rmsnorm(data):
    """liger_kernel.ops.rms_norm.LigerRMSNormFunction in its "gemma" casting: the whole row in fp32 and one
    rounding at the end, as this problem asks ("llama" rounds x/rms to bf16 before the weight)."""
    ops = require("liger_kernel.ops.rms_norm", "liger-kernel")
    x, weight = data
    return ops.LigerRMSNormFunction.apply(x, weight, EPS, 0.0, "gemma", False)  # [m, n]


def quack_rmsnorm(data):
    """quack.rmsnorm(x, weight, eps): CuTe-DSL, for NVIDIA sm90 and later."""
    library = require("quack", "quack-kernels")
    x, weight = data
    require_sm90(x, "QuACK")
    return library.rmsnorm(x, weight, eps=EPS)  # [m, n]

