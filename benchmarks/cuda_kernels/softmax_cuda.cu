// Row softmax of a bf16 matrix, one block of 256 threads per row, fp32 math: the CUDA kernel that
// benchmarks/call_breakdown.py builds into two candidates, one through load_inline, one through nvcc and ctypes.
#include <cuda_bf16.h>
#include <math.h>

#define THREADS 256

__device__ float block_reduce(float v, float* scratch, bool take_max) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float other = scratch[threadIdx.x + s];
            scratch[threadIdx.x] = take_max ? fmaxf(scratch[threadIdx.x], other) : scratch[threadIdx.x] + other;
        }
        __syncthreads();
    }
    float out = scratch[0];
    __syncthreads();
    return out;
}

__global__ void row_softmax(const __nv_bfloat16* x, __nv_bfloat16* y, int n) {
    __shared__ float scratch[THREADS];
    const __nv_bfloat16* row = x + (size_t)blockIdx.x * n;
    __nv_bfloat16* out = y + (size_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += THREADS) m = fmaxf(m, __bfloat162float(row[i]));
    m = block_reduce(m, scratch, true);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += THREADS) sum += expf(__bfloat162float(row[i]) - m);
    float inv = 1.0f / block_reduce(sum, scratch, false);
    for (int i = threadIdx.x; i < n; i += THREADS) out[i] = __float2bfloat16(expf(__bfloat162float(row[i]) - m) * inv);
}

extern "C" void launch_row_softmax(const void* x, void* y, int rows, int n, void* stream) {
    row_softmax<<<rows, THREADS, 0, (cudaStream_t)stream>>>((const __nv_bfloat16*)x, (__nv_bfloat16*)y, n);
}
