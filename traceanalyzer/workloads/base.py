"""What a workload module hands the runner: a step to call, and how to warm it up."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


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


def check_variant(variant: str, allowed: tuple[str, ...]) -> None:
    if variant not in allowed:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(allowed)}")


def busy_cpu(seconds: float) -> None:
    """Hold the CPU for ``seconds`` without sleeping: stands in for the Python a real loop runs
    per step (logging, metrics, scheduling), which the GPU can overlap only if nothing syncs."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
