"""Two processes on one GPU in one Nsight Systems capture: the evidence that the rules judge every
rank of a file, not only the first.

    nsys profile ... python3 two_processes.py [--steps 8]

The first child (the lower pid: rank 0 of the export) trains a small MLP in NVTX-marked steps and
copies nothing after set-up. The second (rank 1) sends batches of features from pageable host
memory, runs a small projection on each and reads the result back: its GPU mostly copies
(memcpy-bound). The launcher itself touches no GPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def compute(steps: int) -> None:
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Linear(4096, 4096, device="cuda") for _ in range(4)]
    opt = torch.optim.SGD([p for layer in layers for p in layer.parameters()], lr=1e-3)
    x = torch.randn(4096, 4096, device="cuda")
    for i in range(steps):
        torch.cuda.nvtx.range_push(f"step {i}")
        y = x
        for layer in layers:
            y = torch.relu(layer(y))
        y.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def copies(steps: int) -> None:
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    host = [torch.from_numpy(rng.standard_normal((32768, 1024), dtype=np.float32))
            for _ in range(2)]  # 128 MiB each, pageable
    weight = torch.randn(1024, 256, device="cuda") / 32.0
    for i in range(steps):
        torch.cuda.nvtx.range_push(f"step {i}")
        x = host[i % 2].to("cuda")
        out = torch.relu(x @ weight).cpu()
        torch.cuda.nvtx.range_pop()
    del out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--child", choices=("compute", "copies"))
    args = ap.parse_args()
    if args.child == "compute":
        compute(args.steps)
        return
    if args.child == "copies":
        copies(args.steps * 3)
        return
    first = subprocess.Popen([sys.executable, __file__, "--child", "compute",
                              "--steps", str(args.steps)])
    time.sleep(0.5)  # the compute child gets the lower pid and starts first: rank 0
    second = subprocess.Popen([sys.executable, __file__, "--child", "copies",
                               "--steps", str(args.steps)])
    sys.exit(first.wait() or second.wait())


if __name__ == "__main__":
    main()
