"""A training program recorded the way users record: a visible start-up, then numbered steps.

    python3 train.py --model gpt|convnet --dtype bf16|fp32|fp16 --profiler none|torch|torch-whole|range
                     [--empty-cache] [--steps 8] [--step-name 'step {i}'] --out DIR --name NAME

Start-up (model built on the CPU, a checkpoint-like state dict made and loaded, the weights
copied to the GPU from pageable memory) takes a few seconds before the first step. Each step is
an NVTX range named by ``--step-name`` (``torch.cuda.nvtx.range_push``), as users mark steps.

- ``none``: no profiler; also what ``nsys profile`` of the whole process records.
- ``range``: ``cudaProfilerStart``/``Stop`` around the steps, for
  ``nsys profile --capture-range=cudaProfilerApi``.
- ``torch``: torch.profiler with a schedule (wait 1, warmup 1, active N-2) and ``prof.step()``.
- ``torch-whole``: torch.profiler around the whole program, start-up included.

Every run writes ``NAME.record.json``: the step time measured with CUDA events on the same
program without a profiler (``none`` runs only), ``torch.cuda.max_memory_allocated()``, and with
``--flops`` the FLOPs of one step from ``torch.utils.flop_counter.FlopCounterMode`` (total and
per operator).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, D, HEADS, LAYERS, T, BATCH = 8192, 768, 12, 6, 512, 8
IMAGE, IMAGES = 128, 64  # the convnet's input side and batch


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(T, D))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def convnet() -> nn.Module:
    def stage(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True), nn.MaxPool2d(2))

    return nn.Sequential(stage(3, 64), stage(64, 128), stage(128, 256), stage(256, 512),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def build(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = GPT() if args.model == "gpt" else convnet()
    # A checkpoint-like state dict made and loaded on the CPU, as a real start-up loads one.
    state = {k: torch.randn_like(v) * 0.02 for k, v in model.state_dict().items()
             if v.is_floating_point()}
    model.load_state_dict(state, strict=False)
    for p in model.parameters():  # one pageable host-to-device copy per tensor
        p.data = p.data.to("cuda")
    for name, b in model.named_buffers():
        model.get_buffer(name).data = b.data.to("cuda")
    if args.model == "convnet":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    scaler = torch.amp.GradScaler("cuda") if args.dtype == "fp16" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.dtype]
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    gen = torch.Generator().manual_seed(0)
    if args.model == "gpt":
        pinned = [torch.randint(0, VOCAB, (BATCH, T + 1), generator=gen).pin_memory()
                  for _ in range(2)]
    else:
        pinned = [(torch.randn(IMAGES, 3, IMAGE, IMAGE, generator=gen).pin_memory(),
                   torch.randint(0, 1000, (IMAGES,), generator=gen).pin_memory())
                  for _ in range(2)]
    counter = {"i": 0}

    def loss_of() -> torch.Tensor:
        batch = pinned[counter["i"] % 2]
        counter["i"] += 1
        ctx = torch.autocast("cuda", dtype=dtype) if dtype is not None else _null()
        if args.model == "gpt":
            b = batch.to("cuda", non_blocking=True)
            x, y = b[:, :-1], b[:, 1:]
            with ctx:
                logits = model(x)
            return F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        x = batch[0].to("cuda", non_blocking=True).to(memory_format=torch.channels_last)
        y = batch[1].to("cuda", non_blocking=True)
        with ctx:
            out = model(x)
        return F.cross_entropy(out.float(), y)

    def step() -> None:
        loss = loss_of()
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        if args.empty_cache:
            torch.cuda.empty_cache()

    return model, step


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run_steps(step, n: int, name: str, prof=None) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        torch.cuda.nvtx.range_push(name.format(i=i))
        step()
        torch.cuda.nvtx.range_pop()
        if prof is not None:
            prof.step()
    torch.cuda.synchronize()


def timed(step, n: int) -> float:  # type: ignore[no-untyped-def]
    """Mean step time in ms over ``n`` steps, with CUDA events around queued work."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def flops_of(step) -> dict:  # type: ignore[no-untyped-def]
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        step()
    torch.cuda.synchronize()
    per_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return {"total": int(counter.get_total_flops()), "per_op": per_op}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["gpt", "convnet"], default="gpt")
    ap.add_argument("--dtype", choices=["bf16", "fp32", "fp16"], default="bf16")
    ap.add_argument("--profiler", choices=["none", "torch", "torch-whole", "range"], default="none")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--step-name", default="step {i}")
    ap.add_argument("--empty-cache", action="store_true")
    ap.add_argument("--memory", action="store_true", help="torch.profiler profile_memory=True")
    ap.add_argument("--flops", action="store_true")
    ap.add_argument("--with-flops", action="store_true",
                    help="torch.profiler with_flops=True (and record_shapes): the trace's own FLOPs")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 for FP32 matmuls and convs")
    ap.add_argument("--time", action="store_true", help="measure the step time unprofiled")
    ap.add_argument("--size", default="", help="comma-separated NAME=VALUE: d_model, layers, "
                    "heads, seq, batch (GPT), image, images (convnet)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = {"d_model": "D", "layers": "LAYERS", "heads": "HEADS", "seq": "T", "batch": "BATCH",
             "image": "IMAGE", "images": "IMAGES"}
    for item in filter(None, args.size.split(",")):
        key, value = item.split("=")
        globals()[names[key]] = int(value)
    t0 = time.perf_counter()
    record: dict = {"name": args.name, "model": args.model, "dtype": args.dtype,
                    "profiler": args.profiler, "steps": args.steps, "step_name": args.step_name,
                    "empty_cache": args.empty_cache,
                    "tf32": args.tf32, "with_flops": args.with_flops, "size": args.size,
                    "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__}
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    trace_path = args.out / f"{args.name}.json.gz"
    whole = None
    if args.profiler == "torch-whole":
        whole = torch.profiler.profile(activities=activities, record_shapes=True,
                                       profile_memory=args.memory)
        whole.__enter__()
    _, step = build(args)
    record["startup_s"] = round(time.perf_counter() - t0, 3)
    torch.cuda.reset_peak_memory_stats()
    if args.profiler == "none":
        run_steps(step, args.steps, args.step_name)
    elif args.profiler == "range":
        torch.cuda.cudart().cudaProfilerStart()
        run_steps(step, args.steps, args.step_name)
        torch.cuda.cudart().cudaProfilerStop()
    elif args.profiler == "torch":
        sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
        with torch.profiler.profile(activities=activities, schedule=sched, record_shapes=True,
                                    profile_memory=args.memory,
                                    with_flops=args.with_flops) as prof:
            run_steps(step, args.steps, args.step_name, prof)
        prof.export_chrome_trace(str(trace_path))
    else:
        run_steps(step, args.steps, args.step_name, whole)
        whole.__exit__(None, None, None)
        whole.export_chrome_trace(str(trace_path))
    record["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
    record["max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
    if args.time:
        for _ in range(3):
            step()
        record["step_ms"] = round(timed(step, 20), 4)
    if args.flops:
        record["flops_per_step"] = flops_of(step)
    record["total_s"] = round(time.perf_counter() - t0, 3)
    (args.out / f"{args.name}.record.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "flops_per_step"}))


if __name__ == "__main__":
    main()
