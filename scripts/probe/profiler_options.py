"""Traces recorded with the torch.profiler options users turn on, to check that the analyzer reads
them (not rule proofs: none of these programs has a planted problem).

    python3 scripts/probe/profiler_options.py OUT_DIR [MODE ...]

Modes (default: all):
  tb_memory   profile_memory, with_flops, with_modules, record_shapes, a wait/warmup/active
              schedule repeated twice, written by tensorboard_trace_handler (*.pt.trace.json.gz)
  compiled    torch.compile(mode="reduce-overhead"): the steps replay CUDA graphs
  two_gpus    one process driving two GPUs (a model split across cuda:0 and cuda:1)
  cpu_only    activities=[CPU] on a GPU program: CUDA runtime calls, no GPU activity
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.profiler import (
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)

WIDTH, BATCH = 2048, 64


def mlp(device: str) -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH)).to(device)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> None:
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def tb_memory(out: Path) -> None:
    model = mlp("cuda")
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(BATCH, WIDTH, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 profile_memory=True, with_flops=True, with_modules=True,
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=2),
                 on_trace_ready=tensorboard_trace_handler(str(out / "tb_memory"), use_gzip=True)) as prof:
        for _ in range(8):
            train_step(model, opt, x)
            prof.step()


class Split(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = mlp("cuda:0"), mlp("cuda:1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x).to("cuda:1"))


def two_gpus(out: Path) -> None:
    model = Split()
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(BATCH, WIDTH, device="cuda:0")
    for _ in range(3):
        train_step(model, opt, x)
    torch.cuda.synchronize("cuda:0")
    torch.cuda.synchronize("cuda:1")
    if out.name == "nsys-torch":  # under Nsight Systems: no second CUPTI client, NVTX steps
        for _ in range(3):
            torch.cuda.nvtx.range_push("step")
            train_step(model, opt, x)
            torch.cuda.synchronize("cuda:1")
            torch.cuda.nvtx.range_pop()
        return
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(3):
            with record_function("ProfilerStep#0"):  # the schedule-less way users mark steps
                train_step(model, opt, x)
            torch.cuda.synchronize("cuda:1")
    prof.export_chrome_trace(str(out / "two_gpus.json"))


def compiled(out: Path) -> None:
    model = torch.compile(mlp("cuda").eval(), mode="reduce-overhead")
    x = torch.randn(BATCH, WIDTH, device="cuda")
    with torch.no_grad():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        # Exported when the active steps end: the profiler clears its events at the next step.
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=1, active=3),
                     on_trace_ready=lambda p: p.export_chrome_trace(
                         str(out / "compiled_cudagraphs.json"))) as prof:
            for _ in range(4):
                model(x)
                prof.step()


def cpu_only(out: Path) -> None:
    model = mlp("cuda")
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(BATCH, WIDTH, device="cuda")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            train_step(model, opt, x)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / "cpu_activity_only.json"))


MODES = {"tb_memory": tb_memory, "compiled": compiled, "two_gpus": two_gpus, "cpu_only": cpu_only}

if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for mode in sys.argv[2:] or list(MODES):
        if mode == "two_gpus" and torch.cuda.device_count() < 2:
            print("skip two_gpus: one GPU", flush=True)
            continue
        try:
            MODES[mode](out)
            print(f"{mode}: ok", flush=True)
        except Exception as exc:  # a probe: report and go on to the next mode
            print(f"{mode}: FAILED {type(exc).__name__}: {exc}", flush=True)
