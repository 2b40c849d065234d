"""Small-batch decoding: one request at a time streams every weight matrix from memory for one
row of activations, so the matrix multiplies run at ~1 FLOP per byte and leave the tensor cores
idle.

bad: 32 requests each decoded alone (a token each: M = 1 per matrix multiply) through a stack of
bf16 MLP layers. good: the same 32 requests in one batch (M = 32): each weight is read once for
all of them, and the matrix multiplies take about as long as one request's did.
"""

from __future__ import annotations

from .base import Built, check_variant

HIDDEN, FFN, LAYERS, REQUESTS = 8192, 16384, 4, 32


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch

    torch.manual_seed(0)
    dt = torch.bfloat16
    weights = []
    for _ in range(LAYERS):
        weights.append(torch.randn(HIDDEN, FFN, device="cuda", dtype=dt) / HIDDEN**0.5)
        weights.append(torch.randn(FFN, HIDDEN, device="cuda", dtype=dt) / FFN**0.5)
    tokens = torch.randn(REQUESTS, HIDDEN, device="cuda", dtype=dt)
    out = torch.empty_like(tokens)

    def forward(x: torch.Tensor) -> torch.Tensor:
        for w in weights:
            x = x @ w
        return x

    if variant == "bad":
        def step() -> None:
            for r in range(REQUESTS):  # as a server without batching runs its queue
                out[r : r + 1] = forward(tokens[r : r + 1])
    else:
        def step() -> None:
            out.copy_(forward(tokens))

    return Built(step, params={"hidden": HIDDEN, "ffn": FFN, "layers": LAYERS,
                               "requests": REQUESTS, "rows_per_matmul": 1 if variant == "bad"
                               else REQUESTS, "dtype": str(dt)})
