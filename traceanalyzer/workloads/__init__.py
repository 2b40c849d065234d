"""Reference workloads: small real GPU programs, each in a ``bad`` and a ``good`` variant.

Every bad variant has one known performance problem (named by the slug of the rule that must
catch it, with the symptom rules it causes) and its good twin fixes it. Run on a GPU they make
the labelled corpus in ``sample_traces/`` that proves the rules on real traces.

This package must stay importable without torch and without the analysis code (the GPU machine
has no polars): it uses relative imports only, and torch/triton are imported inside functions.
``python3 traceanalyzer/workloads/run.py`` therefore works with nothing but torch installed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class WorkloadInfo:
    """What a workload is and which rule its bad variant is made to trigger."""

    name: str
    summary: str
    #: rule slugs the bad variant must trigger and the good variant must not
    rules: tuple[str, ...]
    variants: tuple[str, ...] = ("bad", "good")
    #: processes (one GPU each, started by torchrun) the workload needs
    min_gpus: int = 1
    #: GPUs one process drives (a model split across them)
    gpus_per_process: int = 1
    #: rules whose evidence needs what only torch.profiler records (input shapes, the operator
    #: or DataLoader/optimizer span around a kernel): not required to fire on Nsight traces
    torch_only_rules: tuple[str, ...] = ()
    #: variants besides ``bad`` that keep the problem, in part, so must trigger the rules too
    still_bad: tuple[str, ...] = ()


WORKLOADS: dict[str, WorkloadInfo] = {
    w.name: w
    for w in (
        WorkloadInfo(
            "hidden_sync",
            "training step calling loss.item() and .cpu() every step vs accumulating on device",
            # The symptom too: while the host works after each read, the GPU sits idle.
            ("hidden-sync", "gpu-idle-gaps"),
        ),
        WorkloadInfo(
            "dataloader_stall",
            "DataLoader defaults (slow batches built in-process, pageable H2D) vs workers, pinned, "
            "prefetch, non_blocking",
            ("dataloader-stall", "pageable-memcpy"),
            torch_only_rules=("dataloader-stall",),
        ),
        WorkloadInfo(
            "unfused_elementwise",
            "eager SwiGLU/bias/GELU/residual chain vs one fused Triton kernel (or torch.compile)",
            ("unfused-elementwise-chain",),
            variants=("bad", "good", "compile"),
        ),
        WorkloadInfo(
            "launch_bound",
            "batch-1 decode-like stack of tiny ops launched eagerly vs replayed as a CUDA graph",
            # The symptom too: the gaps between tiny kernels are short, but they add up to a GPU
            # busy a tenth of the time.
            ("launch-overhead-bound", "low-gpu-utilization"),
        ),
        WorkloadInfo(
            "small_grid",
            "CUDA C grid-stride kernel launched with fewer blocks than SMs vs a grid sized to the GPU",
            ("small-grid",),
        ),
        WorkloadInfo(
            "unfused_attention",
            "attention materializing the T x T scores vs scaled_dot_product_attention (flash)",
            ("unfused-attention",),
            torch_only_rules=("unfused-attention",),
        ),
        WorkloadInfo(
            "fp32_matmul",
            "FP32 GEMMs (TF32 off) vs the same GEMMs in BF16 on tensor cores; tf32: the FP32 "
            "GEMMs with TF32 allowed",
            ("fp32-matmul",),
            variants=("bad", "good", "tf32"),
            # TF32 tensor cores run these GEMMs at half the BF16 rate (1.42 against 0.71 ms)
            still_bad=("tf32",),
        ),
        WorkloadInfo(
            "strided_elementwise",
            "bf16 residual add reading a transposed view vs the operand transposed once before "
            "the steps",
            ("memory-bound-below-bandwidth",),
        ),
        WorkloadInfo(
            "small_batch_decode",
            "32 requests decoded one at a time (M = 1 per bf16 matmul) vs the same requests as "
            "one batch (M = 32)",
            ("small-batch-matmul",),
        ),
        WorkloadInfo(
            "odd_matmul_shape",
            "BF16 GEMMs with dimensions of 4095 vs padded to 4096 (multiple of 64)",
            ("odd-matmul-shape", "gemm-below-roofline"),
            torch_only_rules=("odd-matmul-shape", "gemm-below-roofline"),
        ),
        WorkloadInfo(
            "unfused_optimizer",
            "AdamW(foreach=False) over many parameters vs AdamW(fused=True)",
            ("unfused-optimizer",),
            torch_only_rules=("unfused-optimizer",),
        ),
        WorkloadInfo(
            "nccl_overlap",
            "all-reduce of every gradient after backward vs DDP buckets overlapping backward",
            ("nccl-not-overlapped",),
            min_gpus=2,
        ),
        WorkloadInfo(
            "rank_imbalance",
            "each step one rank draws a batch twice as long as the others' (DDP) vs the same "
            "samples balanced across ranks",
            ("collective-wait",),
            min_gpus=2,
        ),
        WorkloadInfo(
            "naive_model_parallel",
            "a bf16 MLP split across two GPUs run one half after the other vs the same split fed "
            "micro-batches, so that both GPUs work at once",
            ("gpus-take-turns",),
            gpus_per_process=2,
        ),
        WorkloadInfo(
            "sync_memcpy",
            "cudaMemcpy/cudaMemset from pageable memory every step vs cudaMemcpyAsync/"
            "cudaMemsetAsync from pinned memory, results read one step later",
            ("sync-memcpy",),
        ),
        WorkloadInfo(
            "gpt_step",
            "small GPT training step: naive (fp32, unfused attention, per-param AdamW, .item(), "
            "pageable input) vs tuned (bf16, SDPA, fused AdamW, no sync, pinned input)",
            # Not hidden-sync: its .item() is followed at once by the next step's launches, so
            # the sync costs only the relaunch (0.01 ms of lost overlap in the torch trace).
            # Not pageable-memcpy: the 0.1 MB batch is copied while the GPU has nothing queued,
            # so the copy waits for nothing and takes 9 µs.
            ("fp32-matmul", "unfused-optimizer"),
            torch_only_rules=("unfused-optimizer",),
        ),
    )
}


def get(name: str) -> WorkloadInfo:
    """The registry entry for ``name``; KeyError names the known workloads."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None


def load_module(name: str) -> ModuleType:
    """Import the module that builds workload ``name`` (this imports torch)."""
    get(name)
    return importlib.import_module(f".{name}", __name__)


__all__ = ["WORKLOADS", "WorkloadInfo", "get", "load_module"]
