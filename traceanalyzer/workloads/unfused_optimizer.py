"""Unfused optimizer: AdamW stepping each of many parameters with its own handful of kernels.

bad: ``AdamW(foreach=False)``: about a dozen tiny kernels per parameter tensor.
good: ``AdamW(fused=True)``: a few multi-tensor kernels for all of them.
"""

from __future__ import annotations

from .base import Built, check_variant

LAYERS, WIDTH = 128, 512


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch

    torch.manual_seed(0)
    params = []
    for _ in range(LAYERS):
        params.append(torch.nn.Parameter(torch.randn(WIDTH, WIDTH, device="cuda") * 0.02))
        params.append(torch.nn.Parameter(torch.zeros(WIDTH, device="cuda")))
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    kwargs = {"foreach": False} if variant == "bad" else {"fused": True}
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kwargs)

    return Built(opt.step, params={"tensors": len(params), "width": WIDTH, **kwargs})
