"""Shared by the held-out programs: profile a few steps of ``step`` with torch.profiler, or, under
Nsight Systems, run them between cudaProfilerStart/Stop in NVTX ranges named as torch.profiler
names its steps. Nothing of traceanalyzer is imported: these run on the GPU machine."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

WAIT, WARMUP, ACTIVE = 1, 1, 3


def profile(name: str, step: Callable[[], None], warmup_steps: int = 3) -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--profiler", choices=("torch", "nsys"), default="torch")
    parser.add_argument("--time", type=int, default=0, metavar="STEPS",
                        help="no profiler: print the mean step time over STEPS steps")
    args = parser.parse_args()
    for _ in range(warmup_steps):
        step()
    torch.cuda.synchronize()
    if args.time:
        # CUDA events bracket the queued work, so GPU idle caused by the host counts.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.time):
            step()
        end.record()
        torch.cuda.synchronize()
        print(f"{name} {os.environ.get('HOLDOUT_VARIANT', 'as written')}: "
              f"{start.elapsed_time(end) / args.time:.3f} ms/step")
        return
    if args.profiler == "nsys":
        torch.cuda.profiler.start()
        for i in range(ACTIVE + 2):
            torch.cuda.nvtx.range_push(f"ProfilerStep#{i}")
            step()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(
        activities=activities, record_shapes=True, with_stack=True,
        schedule=torch.profiler.schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
    ) as prof:
        for _ in range(WAIT + WARMUP + ACTIVE):
            step()
            prof.step()
    torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(args.out, f"{name}.json.gz"))


def lm_train_step(model, opt, inputs, targets, vocab: int) -> Callable[[], None]:
    """One training step of a language model as its tutorials write it: bf16 autocast around
    the forward pass and the loss, then backward and the optimizer."""
    import torch
    import torch.nn.functional as F

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(inputs).view(-1, vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step
