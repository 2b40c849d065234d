"""Unfused elementwise chain: an MLP epilogue ``gelu(silu(gate) * up + bias) + residual``.

bad: eager, 5 kernels per layer, each reading and writing whole activations from HBM.
good: one Triton kernel per layer (kernels.swiglu_bias_gelu_residual).
compile: the eager function through ``torch.compile``, which Inductor fuses into Triton itself.
"""

from __future__ import annotations

from .base import Built, check_variant

ROWS, COLS, LAYERS = 4096, 8192, 6


def eager_epilogue(gate, up, bias, residual):  # type: ignore[no-untyped-def]
    """Separate eager ops: silu, mul, add, gelu, add (5 kernels, 13 tensor passes)."""
    import torch.nn.functional as F

    h = F.silu(gate) * up
    return F.gelu(h + bias, approximate="tanh") + residual


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good", "compile"))
    import torch

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    gates = [torch.randn(ROWS, COLS, device=dev, dtype=dt) for _ in range(LAYERS)]
    ups = [torch.randn(ROWS, COLS, device=dev, dtype=dt) for _ in range(LAYERS)]
    biases = [torch.randn(COLS, device=dev, dtype=dt) * 0.1 for _ in range(LAYERS)]
    x0 = torch.randn(ROWS, COLS, device=dev, dtype=dt)

    if variant == "good":
        from .kernels import swiglu_bias_gelu_residual as fn
    elif variant == "compile":
        fn = torch.compile(eager_epilogue, fullgraph=True, dynamic=False)
    else:
        fn = eager_epilogue

    def step() -> None:
        x = x0
        for g, u, b in zip(gates, ups, biases, strict=True):
            x = fn(g, u, b, x)

    return Built(step, warmup=3,
                 params={"shape": [ROWS, COLS], "layers": LAYERS, "dtype": "bf16"})
