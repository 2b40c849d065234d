"""Synchronous copies and memsets: ``cudaMemcpy``/``cudaMemset`` called in the step loop.

PyTorch itself never makes these calls: every copy it issues is ``cudaMemcpyAsync`` (followed by
``cudaStreamSynchronize`` when the host must wait) and it zeroes memory with a kernel or
``cudaMemsetAsync`` (every torch and nsys trace of this corpus shows only the async forms). Code
that drives the CUDA runtime itself does: a C++/CUDA extension, a ctypes or cuda-python wrapper, a
library on the legacy default stream. This workload is such a program: it calls the CUDA runtime
that PyTorch loaded (through ctypes) for its copies and memsets, and PyTorch for the compute.

Each step copies a batch (fp16, from host memory) to the GPU, clears the output accumulator,
runs an MLP into it, copies the result back, and the host consumes the result and does its own
per-step work (bookkeeping, standing in for the next batch's preparation).

bad: ``cudaMemcpy`` from pageable (numpy) memory, ``cudaMemset``, ``cudaMemcpy`` back to
pageable memory: the read-back blocks until the GPU has finished the step, so the host's work
never overlaps the GPU's.
good: the same bytes with ``cudaMemcpyAsync`` from pinned memory and ``cudaMemsetAsync`` on the
compute stream; results land in a pinned double buffer and the host reads step i-1's result
(its event long complete) while the GPU runs step i.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

from .base import Built, busy_cpu, check_variant, linear_gelu_stack

ROWS, WIDTH, DEPTH, OUT = 4096, 4096, 12, 256
BATCHES = 4  # distinct input batches cycled through (the "data set" already in host memory)
CPU_WORK_S = 0.0015
H2D, D2H = 1, 2  # cudaMemcpyKind


def cudart() -> ctypes.CDLL:
    """The CUDA runtime library PyTorch loaded (so calls share its context and appear in its
    profiler), else the first libcudart found beside the torch install or the toolkit."""
    import torch

    torch.cuda.init()
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as fh:
            paths = [line.split()[-1] for line in fh if "libcudart.so" in line]
    except OSError:
        pass
    for base in sys.path:
        paths += sorted(glob.glob(os.path.join(base, "nvidia", "**", "libcudart.so*"),
                                  recursive=True))
    paths += ["libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so"]
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name, args in (
            ("cudaMemcpy", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]),
            ("cudaMemcpyAsync", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_void_p]),
            ("cudaMemset", [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]),
            ("cudaMemsetAsync", [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]),
            ("cudaSetDevice", [ctypes.c_int]),
        ):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        lib.loaded_from = path  # type: ignore[attr-defined]
        return lib
    raise RuntimeError("no libcudart found")


def _ok(err: int, what: str) -> None:
    if err:
        raise RuntimeError(f"{what} failed with cudaError {err}")


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import numpy as np
    import torch
    from torch import nn

    rt = cudart()
    _ok(rt.cudaSetDevice(torch.cuda.current_device()), "cudaSetDevice")
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    model = nn.Sequential(*linear_gelu_stack(WIDTH, DEPTH), nn.Linear(WIDTH, OUT)).to(dev, dt).eval()
    rng = np.random.default_rng(0)
    data = [rng.standard_normal((ROWS, WIDTH), dtype=np.float32).astype(np.float16)
            for _ in range(BATCHES)]
    d_in = torch.empty(ROWS, WIDTH, device=dev, dtype=torch.float16)
    d_out = torch.empty(ROWS, OUT, device=dev, dtype=torch.float32)
    in_bytes, out_bytes = d_in.numel() * 2, d_out.numel() * 4
    bad = variant == "bad"
    if bad:  # the batches and the result buffer in ordinary (pageable) host memory
        host_in = data
        host_out = [np.empty((ROWS, OUT), dtype=np.float32)]
    else:  # pinned copies of the same batches, and a pinned double buffer for results
        host_in = []
        for a in data:
            t = torch.empty(ROWS, WIDTH, dtype=torch.float16, pin_memory=True)
            t.numpy()[:] = a
            host_in.append(t.numpy())
        host_out = [torch.empty(ROWS, OUT, dtype=torch.float32, pin_memory=True).numpy()
                    for _ in range(2)]
    state: dict[str, object] = {"i": 0, "events": [None, None]}
    results: list[float] = []

    @torch.no_grad()
    def compute() -> None:
        d_out.add_(model(d_in.to(dt)).float())  # accumulate into the cleared buffer

    def consume(out: np.ndarray) -> None:
        results.append(float(out[:, :8].astype(np.float64).sum()))
        busy_cpu(CPU_WORK_S)

    def step_bad() -> None:
        i = state["i"]
        src = host_in[i % BATCHES]
        _ok(rt.cudaMemcpy(d_in.data_ptr(), src.ctypes.data, in_bytes, H2D), "cudaMemcpy HtoD")
        _ok(rt.cudaMemset(d_out.data_ptr(), 0, out_bytes), "cudaMemset")
        compute()
        dst = host_out[0]  # returns once the GPU has finished the step and the copy
        _ok(rt.cudaMemcpy(dst.ctypes.data, d_out.data_ptr(), out_bytes, D2H), "cudaMemcpy DtoH")
        consume(dst)
        state["i"] = i + 1

    def step_good() -> None:
        i = state["i"]
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        src, slot = host_in[i % BATCHES], i % 2
        _ok(rt.cudaMemcpyAsync(d_in.data_ptr(), src.ctypes.data, in_bytes, H2D, stream),
            "cudaMemcpyAsync HtoD")
        _ok(rt.cudaMemsetAsync(d_out.data_ptr(), 0, out_bytes, stream), "cudaMemsetAsync")
        compute()
        _ok(rt.cudaMemcpyAsync(host_out[slot].ctypes.data, d_out.data_ptr(), out_bytes, D2H,
                               stream), "cudaMemcpyAsync DtoH")
        events = state["events"]
        ev = torch.cuda.Event()
        ev.record()
        prev = events[1 - slot]
        if prev is not None:  # step i-1's result: done while step i was being queued
            prev.synchronize()
            consume(host_out[1 - slot])
        events[slot] = ev
        state["i"] = i + 1

    def close() -> None:  # the last result of the good variant is still in flight
        events = state["events"]
        last = (state["i"] - 1) % 2
        if not bad and events[last] is not None:
            events[last].synchronize()
            consume(host_out[last])
            events[last] = None

    return Built(
        step_bad if bad else step_good, close=close, results=results,
        params={"rows": ROWS, "width": WIDTH, "depth": DEPTH, "out": OUT, "dtype": "bf16",
                "h2d_mb": in_bytes / 2**20, "d2h_mb": out_bytes / 2**20,
                "host_memory": "pageable" if bad else "pinned",
                "api": "cudaMemcpy/cudaMemset" if bad else "cudaMemcpyAsync/cudaMemsetAsync",
                "cpu_work_ms": CPU_WORK_S * 1e3, "libcudart": rt.loaded_from},
    )
