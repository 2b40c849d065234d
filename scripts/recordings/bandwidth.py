"""Memory-bound steps that reach HBM bandwidth or fall far below it: the evidence for the
memory-bound-below-bandwidth rule (docs/perf-model.md).

    python3 bandwidth.py --variant V --profiler none|torch [--time] [--steps 6] --out DIR --name NAME

- ``norm_channels_last``: BatchNorm2d training (forward and backward) of a bf16 activation of
  256 x 64 x 112 x 112 in channels-last memory, as a channels-last convnet runs it.
- ``norm_contiguous``: the same in contiguous (NCHW) memory.
- ``transpose_copy``: ``x.t().contiguous()`` of a 8192 x 8192 bf16 matrix.
- ``contiguous_copy``: ``x.clone()`` of the same matrix.

Each step runs its operation 8 times inside an NVTX range ``step {i}``; ``torch`` runs
torch.profiler with a schedule (wait 1, warmup 1, active N-2) and ``record_shapes=True``.
``--time`` writes the unprofiled step time (CUDA events, 10 steps) to ``NAME.record.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

REPEAT = 8


def build(variant: str):  # noqa: ANN201 - a step function
    torch.manual_seed(0)
    if variant.startswith("norm"):
        x = torch.randn(256, 64, 112, 112, device="cuda", dtype=torch.bfloat16)
        if variant == "norm_channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_(True)
        w = torch.ones(64, device="cuda", requires_grad=True)
        b = torch.zeros(64, device="cuda", requires_grad=True)
        rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
        gy = torch.randn_like(x)

        def step() -> None:
            for _ in range(REPEAT):
                y = F.batch_norm(x, rm, rv, w, b, training=True)
                y.backward(gy)
        return step
    m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)

    def step_copy() -> None:
        for _ in range(REPEAT):
            (m.t().contiguous() if variant == "transpose_copy" else m.clone())
    return step_copy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", required=True, choices=["norm_channels_last", "norm_contiguous",
                                                         "transpose_copy", "contiguous_copy"])
    ap.add_argument("--profiler", choices=["none", "torch"], default="torch")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    step = build(args.variant)
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    record = {"name": args.name, "variant": args.variant, "device": torch.cuda.get_device_name(),
              "torch": torch.__version__}
    if args.profiler == "torch":
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
        with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True) as prof:
            for i in range(args.steps):
                torch.cuda.nvtx.range_push(f"step {i}")
                step()
                torch.cuda.nvtx.range_pop()
                prof.step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(args.out / f"{args.name}.json.gz"))
    if args.time:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(10):
            step()
        end.record()
        end.synchronize()
        record["step_ms"] = round(start.elapsed_time(end) / 10, 4)
    (args.out / f"{args.name}.record.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
