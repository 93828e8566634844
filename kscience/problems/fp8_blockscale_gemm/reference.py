"""Block-scaled fp8 matrix product, C = (A * a_scale) @ (B * b_scale)^T, stored as bf16.

The GPU MODE `amd-fp8-mm` task (reference-kernels), with the DeepSeek-R1 shapes it used.
Quantisation is blockwise with 128-wide blocks: `a_scale` holds one fp32 factor per row of
A and per 128 columns of K, `b_scale` one per 128x128 block of B. A and B are stored
column-major (the transpose of a contiguous K x M and K x N tensor), exactly as the original
task hands them out, and C is a preallocated row-major bf16 buffer the candidate fills.
"""

import torch

from kscience.problems.libraries import GEMM_CALLS, Library
from kscience.problems.spec import ProblemError

DESCRIPTION = ("fp8 GEMM with 128-block fp32 scales (GPU MODE amd-fp8-mm): "
               "c = (a*a_scale) @ (b*b_scale)^T, a and b column-major, c bf16")
PRECISION = "fp8"
OUTPUT_ARGS = (4,)  # c is preallocated; a, b and the scales must come back unchanged
SCALE_BLOCK = 128  # quantisation block along K (for A and B) and along N (for B)

# Products of fp8 values are exact in fp32, so a kernel that accumulates in fp32 differs
# from the reference only by summation order and by bf16 rounding of the output (one ulp
# is 2**-7 relative). Hopper's fp8 tensor cores, left to Triton's default, accumulate with
# reduced precision instead: on these shapes that was measured off by up to 0.08 where
# outputs cancel to near zero, and fails. (GPU MODE's own check was rtol 1e-2, atol 5e-4.)
RTOL = 2e-2
ATOL = 1e-3

_NK = [(1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048),
       (4608, 7168), (7168, 2304), (512, 7168), (4096, 512)]
BENCHMARKS = [{"m": m, "n": n, "k": k} for m in (1024, 6144) for n, k in _NK]
TESTS = [{"m": m, "n": n, "k": k} for m, n, k in [
    (64, 64, 128), (64, 1536, 7168), (64, 3072, 1536), (64, 576, 7168), (96, 7168, 256),
    (96, 7168, 2048), (96, 4608, 7168), (128, 7168, 2304), (128, 512, 7168),
    (512, 4096, 512), (512, 1536, 7168)]]
# Small enough for the Triton interpreter. n=192 and n=320 end in a partial scale block, as
# n=576 does on the GPU; with BLOCK_N above 128 one tile also spans two scale blocks.
CPU_TESTS = [{"m": 64, "n": 64, "k": 128}, {"m": 32, "n": 128, "k": 256}, {"m": 96, "n": 192, "k": 384}]
CPU_BENCHMARKS = [{"m": 128, "n": 320, "k": 512}]


def fp8_dtype(device) -> torch.dtype:
    """MI300 implements the "fnuz" fp8 variant; Hopper and the CPU implement OCP e4m3fn."""
    on_rocm = torch.device(device).type == "cuda" and torch.version.hip is not None
    return torch.float8_e4m3fnuz if on_rocm else torch.float8_e4m3fn


# The layout a and b are handed out in: "column-major", the task's; "k-major", the copies cuBLAS reads, made
# beforehand (K zero-padded where it needs it), for timing the vendor call alone (VENDOR_ALONE)
OPERANDS = "column-major"
OVERRIDABLE = {"OPERANDS": ("column-major", "k-major")}


def generate_input(seed: int, device="cuda", *, m: int, n: int, k: int):
    """(a, b, a_scale, b_scale, c): fp8 a [m, k] and b [n, k] column-major, fp32 scales, bf16 c."""
    data = _task_input(seed, device, m=m, n=n, k=k)
    if OPERANDS == "k-major":  # zero padding along K changes no product
        return (*k_major_operands(*data[:4]), data[4])
    return data


def _task_input(seed: int, device, *, m: int, n: int, k: int):
    if k % SCALE_BLOCK:
        raise ProblemError(f"k={k} must be a multiple of the {SCALE_BLOCK}-wide scale block")
    # Drawn on the evaluation device: host-side generation of GPU-sized inputs would dominate
    # an evaluation. The numbers for a seed are the same on every device of one kind.
    gen = torch.Generator(device=device).manual_seed(seed)
    fp8 = fp8_dtype(device)
    scale_k = k // SCALE_BLOCK
    scale_n = -(-n // SCALE_BLOCK)
    a_t = torch.randn(k, m, generator=gen, device=device).to(fp8)  # [k, m], so a = a_t.T is column-major
    b_t = torch.randn(k, n, generator=gen, device=device).to(fp8)  # [k, n]
    a_scale_t = torch.randn(scale_k, m, generator=gen, device=device)  # [scale_k, m]
    b_scale_t = torch.randn(scale_k, scale_n, generator=gen, device=device)  # [scale_k, scale_n]
    c = torch.zeros(m, n, dtype=torch.bfloat16, device=device)  # [m, n] row-major output buffer
    return a_t.T, b_t.T, a_scale_t.T, b_scale_t.T, c


def ref_kernel(data):
    """Dequantise both operands in fp32, multiply, round once to bf16. Leaves `c` untouched."""
    a, b, a_scale, b_scale, c = data
    m, k = a.shape
    n = b.shape[0]
    # Expand each scale over the elements of its block, then crop the partial edge blocks.
    a_scale_full = a_scale.float().repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]  # [m, k]
    b_scale_full = (b_scale.float().repeat_interleave(SCALE_BLOCK, dim=0)
                    .repeat_interleave(SCALE_BLOCK, dim=1)[:n, :k])  # [n, k]
    a_deq = a.float() * a_scale_full  # [m, k]
    b_deq = b.float() * b_scale_full  # [n, k]
    return (a_deq @ b_deq.T).to(c.dtype)  # [m, n]


VENDOR = "cuBLAS block-scaled fp8 GEMM (torch._scaled_mm, 1x128 x 128x128 scales, K-major copies timed)"
# cuBLAS accumulates blockwise fp8 with Hopper's reduced precision too: on an H100 about 300 of
# 98,304 elements of a test shape miss atol 1e-3 where outputs cancel to near zero (0.621 for
# 0.637). Its time is worth showing as what a user gets, so it is judged at a looser atol: one
# bf16 step at the outputs' typical size (|c| has a median of 20-55 at k >= 1536, where bf16 steps
# by 0.125-0.25), above the 0.08 Triton's default fp8 accumulation was measured off by (above).
VENDOR_TOLERANCE = (RTOL, 0.25)
def vendor_alone_kernel(data):
    """The same cuBLAS call as `vendor_kernel`, on operands already K-major (OPERANDS = "k-major")."""
    a, b, a_scale, b_scale, c = data
    _cublas_fp8_here(a)
    c.copy_(scaled_mm_k_major(a, b, a_scale, b_scale))
    return c


# The vendor row pays for its K-major copies; the same call on copies made beforehand says how much of its time
# is the GEMM and how much the layout change. Not a rival: kernels get the task's column-major operands.
VENDOR_ALONE = Library(name="cuBLAS block-scaled fp8 GEMM alone (torch._scaled_mm on K-major copies made beforehand)",
                       distribution="torch", module="torch",
                       call="kscience.problems.fp8_blockscale_gemm.reference:vendor_alone_kernel",
                       why="the vendor row's GEMM without its copies", overrides={"OPERANDS": "k-major"})

# The vendor path is cuBLAS's blockwise fp8 GEMM, and the eager one dequantises and multiplies through cuBLAS:
# no candidate may call either, so a kernel reported as the model's is never cuBLAS's.
LIBRARY_CALLS = "forbidden"
FORBIDDEN_CALLS = ("torch._scaled_mm", *GEMM_CALLS)


def vendor_kernel(data):
    """cuBLAS's DeepSeek-style blockwise fp8 GEMM (Hopper, CUDA 12.9+), as a user would call it: the
    operands copied K-major (row-major a, column-major b), which is what cuBLAS reads; the copies are
    part of the time. Raises with the reason where this torch, CUDA or GPU cannot run it."""
    a, b, a_scale, b_scale, c = data
    _cublas_fp8_here(a)
    c.copy_(cublas_blockwise(a, b, a_scale, b_scale))
    return c


def _cublas_fp8_here(a) -> None:
    """Raises with the reason where this torch, CUDA or GPU cannot run cuBLAS's blockwise fp8 GEMM."""
    if a.device.type != "cuda" or torch.version.hip is not None:
        raise RuntimeError(f"torch._scaled_mm blockwise fp8 needs an NVIDIA GPU (sm90+, CUDA 12.9+); here: "
                           f"{a.device.type}{' (ROCm)' if torch.version.hip else ''}, torch {torch.__version__}")


def cublas_blockwise(a, b, a_scale, b_scale):
    """The bf16 product through `torch._scaled_mm`, with K zero-padded where cuBLAS needs it.

    cuBLAS reads 128x128 scales with rows of k/128 rounded up to 4 floats, while torch 2.11 accepts
    them only unpadded: where k/128 is not a multiple of 4 (k = 256 and 2304 here), 94-97% of the
    product comes out wrong on an H100 and an H200, and a padded layout is refused.
    Zero-padding K to a multiple of 512 makes the two agree; the padding is timed with the copies."""
    return scaled_mm_k_major(*k_major_operands(a, b, a_scale, b_scale))


def scaled_mm_k_major(a_k, b_k, sa, sb):
    """The cuBLAS call alone, on operands `k_major_operands` laid out: what the vendor row costs without its
    copies (benchmarks/library_baselines.py times it on copies made beforehand)."""
    # a_k [m, k'] row-major, b_k.t() [k', n] column-major, sb.t() [k'/128, n/128] with strides (1, k'/128)
    return torch._scaled_mm(a_k, b_k.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.bfloat16)


def k_major_operands(a, b, a_scale, b_scale):
    """(a_k, b_k, sa, sb): the operands copied K-major, K zero-padded where cuBLAS needs it."""
    (m, k), n = a.shape, b.shape[0]
    scale_n, scale_k = b_scale.shape
    padded_k = -(-scale_k // 4) * 4 * SCALE_BLOCK
    if padded_k == k:
        a_k, b_k, sa, sb = a.contiguous(), b.contiguous(), a_scale, b_scale.contiguous()
    else:
        def zeros(rows):  # fp8 zero is the zero byte
            return torch.zeros(rows, padded_k, dtype=torch.uint8, device=a.device).view(a.dtype)

        a_k, b_k = zeros(m), zeros(n)
        a_k[:, :k], b_k[:, :k] = a, b
        sa = torch.zeros(padded_k // SCALE_BLOCK, m, device=a.device).t()  # [m, L4], outer-dim-major
        sb = torch.zeros(scale_n, padded_k // SCALE_BLOCK, device=a.device)  # [n/128, L4]
        sa[:, :scale_k], sb[:, :scale_k] = a_scale, b_scale
    return a_k, b_k, sa, sb


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def bytes_moved(m: int, n: int, k: int) -> float:
    scale_k = -(-k // SCALE_BLOCK)
    scale_n = -(-n // SCALE_BLOCK)
    fp8_operands = m * k + n * k  # one byte per element
    scales = 4 * (m * scale_k + scale_n * scale_k)
    output = 2 * m * n
    return float(fp8_operands + scales + output)
