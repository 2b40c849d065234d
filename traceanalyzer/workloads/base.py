"""What a workload module hands the runner (a step to call, how to warm it up), and what workloads
share: CPU busy-work, CUDA-event timing, a plain MLP body."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

TARGET_TIMING_S = 1.0  # time_steps aims for about this much timed work


@dataclass
class Built:
    """A ready-to-run variant: ``step()`` runs one training/inference step and returns at once
    (GPU work may still be queued); the runner times and profiles it."""

    step: Callable[[], None]
    #: steps run before timing: compilation, autotuning, allocator and cuDNN/cuBLAS heuristics
    warmup: int = 3
    close: Callable[[], None] | None = None
    #: facts worth keeping in the run record (shapes, dtypes, sizes)
    params: dict[str, object] = field(default_factory=dict)
    #: what the steps computed, one value per step, where a check compares the bad and good variants
    results: list[float] = field(default_factory=list)


def check_variant(variant: str, allowed: tuple[str, ...]) -> None:
    if variant not in allowed:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(allowed)}")


def busy_cpu(seconds: float) -> None:
    """Hold the CPU for ``seconds`` without sleeping: stands in for the Python a real loop runs
    per step (logging, metrics, scheduling), which the GPU can overlap only if nothing syncs."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def time_steps(step, iters: int | None = None) -> tuple[float, int]:
    """Mean step time in ms over ``iters`` steps, timed with CUDA events on the current stream.

    The events bracket queued work, so the figure includes GPU idle time caused by the CPU
    (syncs, slow input), which is what a step really costs.
    """
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if iters is None:  # size the run from one timed step: about TARGET_TIMING_S of work
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        one = max(time.perf_counter() - t0, 1e-5)
        iters = int(min(50, max(5, TARGET_TIMING_S / one)))
        if torch.distributed.is_initialized():  # every rank must run as many collectives
            agreed = torch.tensor([iters], device="cuda")
            torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
            iters = int(agreed.item())
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters, iters


def linear_gelu_stack(width: int, depth: int) -> list:
    """``depth`` pairs of ``Linear(width, width)`` and ``GELU``: the model body of the workloads
    whose subject is not the model (hidden_sync, nccl_overlap, sync_memcpy)."""
    from torch import nn

    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return layers
