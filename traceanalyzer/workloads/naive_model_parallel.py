"""Naive model parallelism: a model split across two GPUs layer by layer runs them one after the
other, each idle while the other computes.

bad: a batch goes through the first half of a bf16 MLP on cuda:0, then through the second half
on cuda:1 (what Hugging Face's device_map="auto" does). good: the same split, the batch cut into
micro-batches issued in order: launches are asynchronous, so cuda:0 computes micro-batch i + 1
while cuda:1 computes micro-batch i.
"""

from __future__ import annotations

from .base import Built, check_variant

WIDTH, LAYERS_PER_GPU, ROWS, MICRO_BATCHES = 8192, 4, 8192, 8


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch

    torch.manual_seed(0)
    dt = torch.bfloat16
    halves = [[torch.randn(WIDTH, WIDTH, device=f"cuda:{d}", dtype=dt) / WIDTH**0.5
               for _ in range(LAYERS_PER_GPU)] for d in (0, 1)]
    x = torch.randn(ROWS, WIDTH, device="cuda:0", dtype=dt)
    out = torch.empty(ROWS, WIDTH, device="cuda:1", dtype=dt)

    def half(h: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
        for w in weights:
            h = torch.relu(h @ w)
        return h

    def forward(rows: torch.Tensor) -> torch.Tensor:
        return half(half(rows, halves[0]).to("cuda:1"), halves[1])

    chunks = 1 if variant == "bad" else MICRO_BATCHES

    @torch.no_grad()
    def step() -> None:
        for i, rows in enumerate(x.chunk(chunks)):
            n = rows.shape[0]
            out[i * n:(i + 1) * n] = forward(rows)
        # The runner times a step with events on cuda:0's stream: make it wait for cuda:1's work.
        torch.cuda.current_stream(0).wait_stream(torch.cuda.current_stream(1))

    return Built(step, params={"width": WIDTH, "layers_per_gpu": LAYERS_PER_GPU, "rows": ROWS,
                               "micro_batches": chunks, "dtype": str(dt)})
