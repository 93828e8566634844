"""No false rejections on a real GPU: the seeds, plain PyTorch, and a CUDA kernel built with
`torch.utils.cpp_extension.load_inline`, all on every test and benchmark shape."""

import shutil

import pytest
import torch
import torch.utils.cpp_extension

import kscience.evaluate.judge.session as session_module
from kscience.evaluate.judge.evaluation import evaluate
from kscience.evaluate.result import OK, EvalRequest, timing_label
from kscience.problems import builtin_names, load_problem, shape_label

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_seed_is_ok_on_the_gpu(name):
    problem = load_problem(name)
    result = evaluate(EvalRequest(problem=name, source=problem.seed_source, shapes="all"), gpu=0, problem=problem,
                      keep_spare=True)
    assert result.status == OK, result.message
    assert result.timing_label == timing_label(False) and not result.device["interpreted"]
    timed = [s for s in result.shapes if s.phase == "benchmark"]
    assert len(timed) == len(problem.benchmarks)
    # An honest seed's own events are the figure: the judge's clock confirms them, never replaces them.
    overruled = [(shape_label(s.shape), s.time_us, s.judge_us, s.message) for s in timed if s.clock != "cuda events"]
    assert not overruled, f"(shape, us, judge's us, message) timed by the judge's clock: {overruled}"
    # Which shape, and what the judge saw of it, where too few calls were timed (the fp8 seed once, on
    # an H200 beside a false-rejection run on two other GPUs of the host, 2026-11-27).
    few = [(shape_label(s.shape), s.n, s.time_us, s.judge_us, s.build_us) for s in timed
           if not (s.time_us > 0 and s.n >= 10)]
    assert not few, f"(shape, calls, us, judge's us, build us) timed with fewer than 10 calls: {few}"
    assert all(s.floor_us is None or s.time_us >= s.floor_us for s in timed)
    # The judge reports the compile facts of every seed's kernels, read as the worker closes (never in a timing).
    assert result.compile_facts and all(f["registers"] and f["num_warps"] for f in result.compile_facts)
    assert result.phases_s["close"] < 2.0


def test_the_judge_keeps_no_gpu_memory_between_evaluations(judge):
    # What the judge computed for a shape is returned to the driver, not kept for the next worker.
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(0)
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """)
    assert result.status == OK, result.message
    assert torch.cuda.memory_reserved(0) <= before


def test_plain_pytorch_is_ok_on_the_gpu(judge):
    result = judge("""
        def custom_kernel(data):
            return honest(data[0])
        """)
    assert result.status == OK, result.message


def test_work_on_a_side_stream_joined_before_returning_is_ok(judge):
    result = judge("""
        _side = torch.cuda.Stream()

        def custom_kernel(data):
            (x,) = data
            _side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(_side):
                y = honest(x)
            torch.cuda.current_stream().wait_stream(_side)
            y.record_stream(torch.cuda.current_stream())
            return y
        """)
    assert result.status == OK, result.message


_CUDA_SOFTMAX = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>

// One block per row: max, sum of exponentials and the normalised row, in fp32.
__global__ void softmax_rows(const __nv_bfloat16* x, __nv_bfloat16* y, int n) {
    extern __shared__ float scratch[];
    const __nv_bfloat16* row = x + (size_t)blockIdx.x * n;
    __nv_bfloat16* out = y + (size_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, __bfloat162float(row[i]));
    scratch[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        __syncthreads();
    }
    m = scratch[0];
    __syncthreads();
    float sum = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += expf(__bfloat162float(row[i]) - m);
    scratch[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
        __syncthreads();
    }
    sum = scratch[0];
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[i] = __float2bfloat16(expf(__bfloat162float(row[i]) - m) / sum);
}

torch::Tensor softmax(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const int threads = 256;
    softmax_rows<<<x.size(0), threads, threads * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const __nv_bfloat16*>(x.data_ptr()), reinterpret_cast<__nv_bfloat16*>(y.data_ptr()),
        (int)x.size(1));
    return y;
}
'''


@pytest.mark.skipif(shutil.which("nvcc") is None and not torch.utils.cpp_extension.CUDA_HOME,
                    reason="needs nvcc for load_inline")
def test_a_cuda_kernel_built_with_load_inline_is_ok(judge, monkeypatch):
    monkeypatch.setitem(session_module.LIMITS, "import", (600.0, 600.0))  # a cold nvcc build takes a while
    result = judge(f"""
        from torch.utils.cpp_extension import load_inline

        _ext = load_inline(name="kscience_test_softmax_rows", cpp_sources="torch::Tensor softmax(torch::Tensor x);",
                           cuda_sources={_CUDA_SOFTMAX!r}, functions=["softmax"])

        def custom_kernel(data):
            return _ext.softmax(data[0].contiguous())
        """)
    assert result.status == OK, f"{result.message}\n{result.stderr_tail[-2000:]}"


def _busy_neighbour(stop) -> None:
    """Another process on the same GPU: bf16 matrix products without pause until told to stop."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    while not stop.is_set():
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def test_honest_kernels_beside_a_busy_neighbour_are_ok(judge):
    """Every synchronised region waits about 2.4 ms for the neighbour's time slices before its first
    event runs (H100, 2026-11-25), in the judge's clock too: beside another process the judge takes
    the round's own null calls for what an empty call costs, and 0.4 ms of work hidden on a side
    stream still counts."""
    import multiprocessing as mp
    import time

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    neighbour = ctx.Process(target=_busy_neighbour, args=(stop,), daemon=True)
    neighbour.start()
    try:
        time.sleep(5)  # the neighbour's CUDA start-up
        problem = load_problem("softmax")
        for _ in range(3):
            result = evaluate(EvalRequest(problem="softmax", source=problem.seed_source, shapes="benchmarks"),
                              gpu=0, problem=problem, keep_spare=True)
            assert result.status == OK, result.message
        side = judge("""
            _side = torch.cuda.Stream()

            def custom_kernel(data):
                _side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(_side):
                    y = honest(data[0])
                    torch.cuda._sleep(700_000)  # about 0.4 ms of hidden work on the side stream
                return y
            """, shapes="benchmarks")
        joined = judge("""
            def custom_kernel(data):
                y = honest(data[0])
                torch.cuda._sleep(700_000)
                return y
            """, shapes="benchmarks")
        assert joined.status == OK and side.status == OK, (joined.message, side.message)
        assert side.geomean_us >= 0.8 * joined.geomean_us, (side.geomean_us, joined.geomean_us)
    finally:
        stop.set()
        neighbour.join(timeout=30)
