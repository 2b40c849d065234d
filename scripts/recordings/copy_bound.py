"""A program whose GPU mostly copies: each step sends a batch of features from the host, runs a
small projection on it, and reads the result back; the evidence for the memcpy-bound rule.

    python3 copy_bound.py --variant pageable|pinned|resident --profiler none|torch [--time]
                          [--steps 6] --out DIR --name NAME

- ``pageable``: the batches live in ordinary host memory (numpy-backed tensors); ``.to("cuda")``
  and ``.cpu()`` go through the driver's staging buffers.
- ``pinned``: the same bytes from and into pinned buffers with ``non_blocking=True``: the copies
  run at the link's speed, and still take most of the step.
- ``resident``: the data set is copied to the GPU once, before the steps; a step only computes
  and keeps its result on the GPU.

Each step is an NVTX range ``step {i}``; ``torch`` runs torch.profiler with a schedule (wait 1,
warmup 1, active N-2). ``--time`` writes the unprofiled step time (CUDA events) to
``NAME.record.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

ROWS, FEATURES, OUT, BATCHES = 32768, 1024, 256, 3  # 128 MiB of float32 features a batch


def build(variant: str):  # noqa: ANN201 - a step function
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    host = [torch.from_numpy(rng.standard_normal((ROWS, FEATURES), dtype=np.float32))
            for _ in range(BATCHES)]
    weight = torch.randn(FEATURES, OUT, device="cuda", dtype=torch.bfloat16) / FEATURES**0.5
    state = {"i": 0}
    if variant == "pinned":
        host = [t.pin_memory() for t in host]
        out_host = torch.empty(ROWS, OUT, dtype=torch.float32, pin_memory=True)
    elif variant == "resident":
        device_data = [t.to("cuda") for t in host]
        acc = torch.zeros(ROWS, OUT, device="cuda")

    @torch.no_grad()
    def project(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.to(torch.bfloat16) @ weight).float()

    def step() -> None:
        i = state["i"]
        state["i"] = i + 1
        if variant == "pageable":
            y = project(host[i % BATCHES].to("cuda")).cpu()
            y.numpy().sum()
        elif variant == "pinned":
            x = host[i % BATCHES].to("cuda", non_blocking=True)
            out_host.copy_(project(x), non_blocking=True)
            torch.cuda.current_stream().synchronize()
        else:
            acc.add_(project(device_data[i % BATCHES]))

    return step


def run_steps(step, n: int, prof=None) -> None:  # noqa: ANN001
    for i in range(n):
        torch.cuda.nvtx.range_push(f"step {i}")
        step()
        torch.cuda.nvtx.range_pop()
        if prof is not None:
            prof.step()
    torch.cuda.synchronize()


def timed(step, n: int) -> float:  # noqa: ANN001
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=["pageable", "pinned", "resident"], required=True)
    ap.add_argument("--profiler", choices=["none", "torch"], default="torch")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    step = build(args.variant)
    record = {"name": args.name, "variant": args.variant, "profiler": args.profiler,
              "steps": args.steps, "rows": ROWS, "features": FEATURES, "out": OUT,
              "h2d_mib_per_step": ROWS * FEATURES * 4 / 2**20,
              "d2h_mib_per_step": 0 if args.variant == "resident" else ROWS * OUT * 4 / 2**20,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for _ in range(2):  # warm up the allocator and cuBLAS
        step()
    if args.profiler == "torch":
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
        with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True) as prof:
            run_steps(step, args.steps, prof)
        prof.export_chrome_trace(str(args.out / f"{args.name}.json.gz"))
    else:
        run_steps(step, args.steps)
    if args.time:
        record["step_ms"] = round(timed(step, 10), 4)
    record["total_s"] = round(time.perf_counter() - t0, 3)
    (args.out / f"{args.name}.record.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
