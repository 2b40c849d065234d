"""A torch.profiler trace of a CUDA graph's capture: hundreds of launches recorded while
capturing (no kernel runs then), and only two replays, as a user gets who profiles the wrong part.

    python3 capture.py OUT.json.gz
"""

from __future__ import annotations

import sys

import torch


def main() -> None:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(512, 512, device="cuda") for _ in range(64)]
    x = torch.randn(32, 512, device="cuda")

    def body() -> torch.Tensor:
        y = x
        for lin in layers:
            y = torch.relu(lin(y))
        return y

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()  # warm-up outside the capture, as torch.cuda.graph requires
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        graph.replay()
        graph.replay()
        torch.cuda.synchronize()
    prof.export_chrome_trace(sys.argv[1])


if __name__ == "__main__":
    main()
