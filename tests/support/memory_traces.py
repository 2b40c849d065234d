"""The synthetic Kineto trace of a training loop whose memory peaks near the device's capacity:
``sample_traces/synthetic/memory_near_capacity_torch.json.gz``, the example memory-near-capacity
fires on (no recorded program comes near 90% of an H200). Regenerate with
``python -m tests.support.memory_traces sample_traces/synthetic``."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.kineto_builder import KinetoBuilder

NAME = "memory_near_capacity_torch.json.gz"
#: The device's memory (KinetoBuilder's H200: 150 GiB).
CAPACITY = 150 * 2**30
WEIGHTS = 100 * 10**9
ACTIVATIONS = 40 * 10**9
WORKSPACE = 5 * 10**9
#: 95% of the device, held by the allocator at the peak of every step.
RESERVED = int(0.95 * CAPACITY)
STEP_US = 10_000.0


def near_capacity() -> KinetoBuilder:
    """Weights allocated before the first step, then 4 steps that each allocate 40 GB of
    activations under aten::linear and 5 GB under aten::matmul and free them at the step's end:
    145 GB allocated at the peak, 153 GB (95%) reserved."""
    b = KinetoBuilder()
    b.op("aten::empty", 10, 20)
    b.memory(15, WEIGHTS, WEIGHTS, WEIGHTS, addr=1)
    for n in range(4):
        t0 = 1000 + n * STEP_US
        b.step(n, t0, STEP_US - 100)
        b.op("aten::linear", t0 + 10, 100, ext=10 * n + 1)
        b.memory(t0 + 20, ACTIVATIONS, WEIGHTS + ACTIVATIONS, RESERVED, addr=2 + 2 * n)
        b.launch(
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", t0 + 50, 10, t0 + 200, 4000, ext=10 * n + 1
        )
        b.op("aten::matmul", t0 + 150, 100, ext=10 * n + 2)
        b.memory(t0 + 160, WORKSPACE, WEIGHTS + ACTIVATIONS + WORKSPACE, RESERVED, addr=3 + 2 * n)
        b.launch(
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", t0 + 200, 10, t0 + 4300, 4000, ext=10 * n + 2
        )
        b.memory(t0 + 9000, -WORKSPACE, WEIGHTS + ACTIVATIONS, RESERVED, addr=3 + 2 * n)
        b.memory(t0 + 9010, -ACTIVATIONS, WEIGHTS, RESERVED, addr=2 + 2 * n)
    return b


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("sample_traces/synthetic")
    out.mkdir(parents=True, exist_ok=True)
    print(near_capacity().write(out / NAME, indent=None))
