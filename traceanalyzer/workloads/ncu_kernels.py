"""Kernel pairs for Nsight Compute: each problem a kernel has, beside a kernel without it.

    ncu --set full -k regex:'ta_|nvjet|gemm' -c 12 -o kernels \
        python3 traceanalyzer/workloads/ncu_kernels.py

(``scripts/recordings/ncu.sh`` records the committed ``sample_traces/ncu/kernels_*`` with it.)

- ``ta_copy_strided`` (each warp reads 32 floats 32 apart: uncoalesced) / ``ta_copy_coalesced``;
- ``ta_regs_heavy`` (64 live accumulators a thread: registers cap occupancy) / ``ta_regs_light``;
- ``ta_transpose_conflicts`` (a 32 x 32 shared tile read by column: 32-way bank conflicts) /
  ``ta_transpose_padded`` (a 33-wide tile);
- ``ta_tail_effect`` (one block more than a full wave of long blocks: the last wave leaves most
  SMs idle) / ``ta_full_waves``;
- a bf16 8192^3 ``torch.matmul`` (cuBLAS, near the tensor cores' peak);
- with ``--spill`` only: ``ta_regs_spill``, ``ta_regs_heavy``'s code under
  ``__launch_bounds__(256, 8)`` (at most 32 registers a thread, so its 64 accumulators spill to
  local memory), then ``ta_regs_heavy`` again as the twin without spills.

Every kernel runs once (the extension is built before the profiled run), so ``-c`` counts
launches one to one. ``--trace FILE`` records the same launches under torch.profiler instead, for
joining Nsight Compute's verdicts to a timeline.

Not a bad/good workload of the registry (it makes no timeline problem): the Nsight Compute proof
set of the kernel rules. Like every module of this package it imports torch only inside
:func:`main` (the ``workloads`` extra), so that it can be imported, and its kernel source read,
without torch.
"""

from __future__ import annotations

import os

#: The kernels each problem is shown on, and the twin without it (rule slug -> (bad, good)).
PAIRS = {
    "uncoalesced-memory-access": ("ta_copy_strided", "ta_copy_coalesced"),
    "low-occupancy": ("ta_regs_heavy", "ta_regs_light"),
    "shared-memory-bank-conflicts": ("ta_transpose_conflicts", "ta_transpose_padded"),
    "tail-effect": ("ta_tail_effect", "ta_full_waves"),
    "compute-bound-below-peak": ("ta_tail_effect", "ta_full_waves"),
    "memory-bound-below-roofline": ("ta_copy_strided", "ta_copy_coalesced"),
    "register-spill": ("ta_regs_spill", "ta_regs_heavy"),
}

CUDA = r"""
#include <cuda_runtime.h>
__global__ void ta_copy_coalesced(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f;
}
__global__ void ta_copy_strided(const float* __restrict__ x, float* __restrict__ y, long n) {
    long t = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long lane = t % 32, warp = t / 32;
    long i = (lane * (n / 32) + warp) % n;  // neighbours in a warp are n/32 floats apart
    if (t < n) y[i] = x[i] * 2.0f;
}
__device__ __forceinline__ void regs_heavy(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc[64];
    #pragma unroll
    for (int k = 0; k < 64; ++k) acc[k] = x[(i + k * 4099) % n];
    #pragma unroll
    for (int r = 0; r < 8; ++r) {
        #pragma unroll
        for (int k = 0; k < 64; ++k) acc[k] = acc[k] * 1.0001f + acc[(k + 1) & 63];
    }
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < 64; ++k) s += acc[k];
    y[i] = s;
}
__global__ void ta_regs_heavy(const float* __restrict__ x, float* __restrict__ y, long n) {
    regs_heavy(x, y, n);
}
__global__ void __launch_bounds__(256, 8) ta_regs_spill(const float* __restrict__ x, float* __restrict__ y, long n) {
    regs_heavy(x, y, n);
}
__global__ void __launch_bounds__(256, 8) ta_regs_light(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.f;
    for (int k = 0; k < 64; ++k) {
        float a = x[(i + k * 4099) % n];
        for (int r = 0; r < 8; ++r) a = a * 1.0001f + 0.5f;
        s += a;
    }
    y[i] = s;
}
template <int PAD>
__device__ void transpose(const float* __restrict__ x, float* __restrict__ y, int w) {
    __shared__ float tile[32][32 + PAD];
    int bx = blockIdx.x * 32, by = blockIdx.y * 32;
    for (int j = threadIdx.y; j < 32; j += blockDim.y)
        tile[j][threadIdx.x] = x[(long)(by + j) * w + bx + threadIdx.x];
    __syncthreads();
    for (int j = threadIdx.y; j < 32; j += blockDim.y)
        y[(long)(bx + j) * w + by + threadIdx.x] = tile[threadIdx.x][j];
}
__global__ void ta_transpose_conflicts(const float* x, float* y, int w) { transpose<0>(x, y, w); }
__global__ void ta_transpose_padded(const float* x, float* y, int w) { transpose<1>(x, y, w); }
__global__ void ta_tail_effect(float* y, int iters) {
    float a = threadIdx.x;
    for (int k = 0; k < iters; ++k) a = a * 0.999f + 1.0f;
    y[(long)blockIdx.x * blockDim.x + threadIdx.x] = a;
}
__global__ void ta_full_waves(float* y, int iters) {
    float a = threadIdx.x;
    for (int k = 0; k < iters; ++k) a = a * 0.999f + 1.0f;
    y[(long)blockIdx.x * blockDim.x + threadIdx.x] = a;
}
void run_all(long x, long y, long n, long img, int w, long out, int sms) {
    const float* X = (const float*)x; float* Y = (float*)y;
    int t = 256; long b = (n + t - 1) / t;
    ta_copy_coalesced<<<b, t>>>(X, Y, n);
    ta_copy_strided<<<b, t>>>(X, Y, n);
    ta_regs_heavy<<<b / 16, t>>>(X, Y, n / 16);
    ta_regs_light<<<b / 16, t>>>(X, Y, n / 16);
    dim3 grid(w / 32, w / 32), block(32, 8);
    ta_transpose_conflicts<<<grid, block>>>((const float*)img, (float*)out, w);
    ta_transpose_padded<<<grid, block>>>((const float*)img, (float*)out, w);
    // 1024-thread blocks, 2 resident a SM: a full wave is 2 x sms blocks.
    ta_tail_effect<<<2 * sms + 1, 1024>>>(Y, 200000);
    ta_full_waves<<<2 * sms, 1024>>>(Y, 200000);
}
void run_spill(long x, long y, long n) {
    const float* X = (const float*)x; float* Y = (float*)y;
    int t = 256; long b = (n + t - 1) / t;
    ta_regs_spill<<<b / 16, t>>>(X, Y, n / 16);
    ta_regs_heavy<<<b / 16, t>>>(X, Y, n / 16);
}
"""
CPP = ("void run_all(long x, long y, long n, long img, int w, long out, int sms);\n"
       "void run_spill(long x, long y, long n);")


def main() -> None:
    import sys

    import torch
    from torch.utils.cpp_extension import load_inline

    trace = sys.argv[sys.argv.index("--trace") + 1] if "--trace" in sys.argv else None
    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    os.makedirs("/tmp/ta_ncu_ext", exist_ok=True)
    ext = load_inline(name="ta_ncu_kernels", cpp_sources=CPP, cuda_sources=CUDA,
                      functions=["run_all", "run_spill"], extra_cuda_cflags=["-O3", "-lineinfo"],
                      build_directory="/tmp/ta_ncu_ext", verbose=False)
    n, w = 1 << 26, 8192
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    img = torch.randn(w, w, device="cuda")
    out = torch.empty_like(img)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()

    def run() -> None:
        ext.run_all(x.data_ptr(), y.data_ptr(), n, img.data_ptr(), w, out.data_ptr(), sms)
        torch.matmul(a, b)
        torch.cuda.synchronize()

    if "--spill" in sys.argv:
        ext.run_spill(x.data_ptr(), y.data_ptr(), n)
        torch.cuda.synchronize()
    elif trace is None:
        run()
    else:
        run()  # warm-up outside the trace
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
            run()
        prof.export_chrome_trace(trace)
    print("ok")


if __name__ == "__main__":
    main()
