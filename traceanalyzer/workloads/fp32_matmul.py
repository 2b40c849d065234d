"""FP32 matmuls: GEMMs in float32 with TF32 off run on the CUDA cores, not the tensor cores.

bad: float32 4096 x 4096 GEMMs. good: the same GEMMs in bfloat16 (about 10x the peak FLOP/s).
"""

from __future__ import annotations

from .base import Built, check_variant

M = K = N = 4096
CHAIN = 4


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default, made explicit
    torch.manual_seed(0)
    dt = torch.float32 if variant == "bad" else torch.bfloat16
    a = torch.randn(M, K, device="cuda", dtype=dt)
    ws = [torch.randn(K, N, device="cuda", dtype=dt) / K**0.5 for _ in range(CHAIN)]

    def step() -> None:
        x = a
        for w in ws:
            x = x @ w

    return Built(step, params={"M": M, "K": K, "N": N, "chain": CHAIN, "dtype": str(dt)})
