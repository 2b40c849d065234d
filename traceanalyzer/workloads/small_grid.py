"""Small grid: a CUDA C grid-stride kernel launched with fewer blocks than the GPU has SMs.

The kernel (built with ``torch.utils.cpp_extension.load_inline``) is memory-bound; with 16 blocks
of 256 threads most SMs have nothing to do and HBM bandwidth goes unused. good: the same kernel
with a grid of 4 blocks per SM. Only the launch configuration differs.
"""

from __future__ import annotations

import os

from .base import Built, check_variant

N = 1 << 25  # 32 M floats: 128 MiB per array
THREADS = 256
BAD_BLOCKS = 16
REPEATS = 4

CUDA_SRC = r"""
__global__ void saxpy_grid_stride(const float* __restrict__ x, float* __restrict__ y,
                                  float a, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = a * x[i] + y[i];
}

void saxpy_launch(long long x, long long y, double a, long long n,
                  long long blocks, long long threads, long long stream) {
    saxpy_grid_stride<<<(unsigned)blocks, (unsigned)threads, 0, (cudaStream_t)stream>>>(
        (const float*)x, (float*)y, (float)a, n);
}
"""
CPP_SRC = (
    "void saxpy_launch(long long x, long long y, double a, long long n,"
    " long long blocks, long long threads, long long stream);"
)


def load_extension():  # type: ignore[no-untyped-def]
    """Compile (or reuse) the extension; only sm_90-class code to keep nvcc quick."""
    import torch
    from torch.utils.cpp_extension import load_inline

    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    build_dir = os.environ.get("TRACEANALYZER_EXT_DIR", "/tmp/traceanalyzer_ext")
    os.makedirs(build_dir, exist_ok=True)
    return load_inline(
        name="traceanalyzer_small_grid",
        cpp_sources=CPP_SRC,
        cuda_sources=CUDA_SRC,
        functions=["saxpy_launch"],
        extra_cflags=["-O1"],
        extra_cuda_cflags=["-O3"],
        build_directory=build_dir,
        verbose=False,
    )


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch

    ext = load_extension()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks = BAD_BLOCKS if variant == "bad" else 4 * sms
    x = torch.randn(N, device="cuda")
    y = torch.randn(N, device="cuda")

    def step() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(REPEATS):
            ext.saxpy_launch(x.data_ptr(), y.data_ptr(), 0.5, N, blocks, THREADS, stream)

    return Built(step, params={"n": N, "blocks": blocks, "threads": THREADS, "sm_count": sms})
