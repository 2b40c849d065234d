"""Launch-bound: a batch-1, decode-like stack of tiny ops.

Each kernel runs for a few microseconds, less than the CPU needs to launch it, so the GPU waits
on the launcher. good: the same step captured once as a CUDA graph and replayed with one launch.
"""

from __future__ import annotations

from .base import Built, check_variant

WIDTH, BLOCKS = 512, 24


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(WIDTH)
            self.fc = nn.Linear(WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.nn.functional.gelu(self.fc(self.norm(x)))

    model = nn.Sequential(*[Block() for _ in range(BLOCKS)]).to(dev, dt).eval()
    x = torch.randn(1, WIDTH, device=dev, dtype=dt)  # one token

    if variant == "bad":
        def step() -> None:
            with torch.inference_mode():
                model(x)

        return Built(step, params={"width": WIDTH, "blocks": BLOCKS, "batch": 1})

    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.inference_mode():
        for _ in range(3):  # warm up on a side stream before capture, as CUDA graphs require
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        static_out = model(static_x)

    def step() -> None:
        graph.replay()

    return Built(step, params={"width": WIDTH, "blocks": BLOCKS, "batch": 1, "cuda_graph": True,
                               "out_shape": list(static_out.shape)})
