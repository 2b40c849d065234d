"""FP32 matmuls: GEMMs in float32 with TF32 off run on the CUDA cores, not the tensor cores.

bad: float32 4096 x 4096 GEMMs. good: the same GEMMs in bfloat16 (about 10x the peak FLOP/s).
tf32: the float32 GEMMs with ``torch.backends.cuda.matmul.allow_tf32 = True``: tensor cores at
TF32 precision (half the BF16 peak); the evidence for judging such GEMMs against the TF32 peak.
"""

from __future__ import annotations

from .base import Built, check_variant

M = K = N = 4096
CHAIN = 4


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good", "tf32"))
    import torch

    # False is PyTorch's default, made explicit
    torch.backends.cuda.matmul.allow_tf32 = variant == "tf32"
    torch.manual_seed(0)
    dt = torch.bfloat16 if variant == "good" else torch.float32
    a = torch.randn(M, K, device="cuda", dtype=dt)
    ws = [torch.randn(K, N, device="cuda", dtype=dt) / K**0.5 for _ in range(CHAIN)]

    def step() -> None:
        x = a
        for w in ws:
            x = x @ w

    return Built(step, params={"M": M, "K": K, "N": N, "chain": CHAIN, "dtype": str(dt)})
