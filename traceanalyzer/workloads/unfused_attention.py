"""Unfused attention: causal attention that writes the T x T score matrix to HBM.

bad: ``q @ k^T``, mask, softmax (in fp32), ``@ v``: several kernels, each moving B*H*T*T values.
good: ``scaled_dot_product_attention(is_causal=True)``, which picks the flash kernel on H200.
"""

from __future__ import annotations

import math

from .base import Built, check_variant

B, H, T, D = 8, 16, 2048, 64


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dt) for _ in range(3))
    causal = torch.ones(T, T, device=dev, dtype=torch.bool).triu(1)
    scale = 1.0 / math.sqrt(D)

    def step_bad() -> None:
        with torch.inference_mode():
            s = (q @ k.transpose(-2, -1)) * scale
            s = s.masked_fill(causal, float("-inf"))
            p = torch.softmax(s.float(), dim=-1).to(dt)
            p @ v

    def step_good() -> None:
        with torch.inference_mode():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return Built(step_bad if variant == "bad" else step_good,
                 params={"B": B, "H": H, "T": T, "D": D, "dtype": "bf16"})
