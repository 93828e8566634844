"""Row softmax of a bf16 matrix: y[i, :] = exp(x[i, :] - max x[i, :]) / sum exp(x[i, :] - max x[i, :]).

A memory-bound fused kernel (Triton tutorial 02): one read of x and one write of y is the
whole cost, so the score is how close a kernel gets to the memory bandwidth.
"""

import torch

from kscience.problems.libraries import liger, quack, require, require_sm90

DESCRIPTION = "row softmax of an M x N bf16 matrix (fp32 math, bf16 output)"
PRECISION = "fp32"  # the arithmetic runs on CUDA cores in fp32; memory bounds it anyway

# The output is rounded to bf16 once; two correct fp32 computations can land one bf16 ulp
# (at most 2**-7 relative) apart. Outputs are probabilities as small as 1/N and below, so
# the absolute floor must stay well under 1/N for the widest rows (N = 32768).
RTOL = 1e-2
ATOL = 1e-6

BENCHMARKS = [{"m": 4096, "n": 4096}, {"m": 8192, "n": 8192}, {"m": 16384, "n": 2048},
              {"m": 2048, "n": 32768}]
TESTS = [{"m": 1, "n": 128}, {"m": 127, "n": 1000}, {"m": 256, "n": 4099},
         {"m": 64, "n": 32768}, {"m": 4096, "n": 4096}]
CPU_TESTS = [{"m": 1, "n": 128}, {"m": 33, "n": 1000}, {"m": 8, "n": 4099}]
CPU_BENCHMARKS = [{"m": 256, "n": 2048}]


def generate_input(seed: int, device="cuda", *, m: int, n: int):
    """(x,) with x [m, n] bf16, spread wide enough that rows are far from uniform."""
    # Drawn on the evaluation device: host-side generation of GPU-sized inputs would dominate
    # an evaluation. The numbers for a seed are the same on every device of one kind.
    gen = torch.Generator(device=device).manual_seed(seed)
    x = (3.0 * torch.randn(m, n, generator=gen, device=device)).to(torch.bfloat16)  # [m, n]
    return (x,)


def ref_kernel(data):
    (x,) = data
    return torch.softmax(x.float(), dim=-1).to(x.dtype)  # [m, n]


def eager_kernel(data):
    (x,) = data
    return torch.softmax(x, dim=-1)  # [m, n]: one fused kernel, fp32 inside, bf16 in and out


def flops(m: int, n: int) -> float:
    # max, subtract, exp, sum, divide: five operations per element
    return 5.0 * m * n


def bytes_moved(m: int, n: int) -> float:
    return 2.0 * m * n * 2  # read x, write y, both bf16


# What a user would install instead; no candidate may call them (nor their packages), nor PyTorch's own
# softmax under any of its names (eager_kernel's op, and log_softmax, one exp away), so a kernel reported as
# the model's is never the library's.
LIBRARY_CALLS = "forbidden"
FORBIDDEN_CALLS = ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax",
                   "torch.nn.Softmax", "torch._softmax", "torch._safe_softmax", "torch._masked_softmax",
                   "torch.log_softmax", "torch.nn.functional.log_softmax", "torch.Tensor.log_softmax",
                   "torch.special.log_softmax", "torch.nn.LogSoftmax", "torch._log_softmax")
LIBRARIES = [liger("softmax", "kscience.problems.softmax.reference:liger_softmax", "liger_kernel.ops.softmax"),
             quack("softmax", "kscience.problems.softmax.reference:quack_softmax")]


def liger_softmax(data):
    """liger_kernel.ops.softmax.LigerSoftmaxFunction over the last dimension."""
    ops = require("liger_kernel.ops.softmax", "liger-kernel")
    (x,) = data
    return ops.LigerSoftmaxFunction.apply(x)  # [m, n]


def quack_softmax(data):
    """quack.softmax(x): CuTe-DSL, for NVIDIA sm90 and later. QuACK reads rows in 16-byte vectors and refuses a
    row length that is not a multiple of one; as a user would, such rows are padded with -inf (exp(-inf) adds 0
    to every sum) and cut back. Every benchmark shape's rows are whole vectors, so no timed call pads."""
    library = require("quack", "quack-kernels")
    (x,) = data
    require_sm90(x, "QuACK")
    return padded_to_vectors(library.softmax, x)  # [m, n]


def padded_to_vectors(softmax, x: torch.Tensor, vector_bytes: int = 16) -> torch.Tensor:
    """softmax(x) over rows padded with -inf to a whole number of `vector_bytes`, cut back to x's width."""
    n = x.shape[-1]
    pad = -n % (vector_bytes // x.element_size())
    if not pad:
        return softmax(x)
    return softmax(torch.nn.functional.pad(x, (0, pad), value=float("-inf")))[..., :n].contiguous()
