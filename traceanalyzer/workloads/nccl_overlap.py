"""Unoverlapped NCCL: gradients all-reduced one by one after backward, on the compute stream.

bad: backward finishes, then every gradient is all-reduced in turn: the GPU computes nothing
while NCCL runs. good: DistributedDataParallel's buckets all-reduce on NCCL's stream while
backward is still computing the earlier layers' gradients.

Needs 2+ GPUs, one process each: ``torchrun --nproc-per-node N traceanalyzer/workloads/run.py
nccl_overlap --variant bad --profiler torch --out DIR`` (one trace per rank).
"""

from __future__ import annotations

from .base import Built, check_variant

BATCH, WIDTH, DEPTH = 8192, 4096, 12


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch
    import torch.distributed as dist
    from torch import nn

    if not dist.is_initialized() or dist.get_world_size() < 2:
        raise RuntimeError("nccl_overlap needs torch.distributed with 2+ ranks (use torchrun)")
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    model: nn.Module = nn.Sequential(*layers).to(dev, dt)
    x = torch.randn(BATCH, WIDTH, device=dev, dtype=dt)
    world = dist.get_world_size()

    if variant == "good":
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> None:
        loss = model(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if variant == "bad":
            for p in model.parameters():
                dist.all_reduce(p.grad)  # after backward, one at a time: nothing to overlap
                p.grad.div_(world)
        opt.step()

    return Built(step, params={"batch": BATCH, "width": WIDTH, "depth": DEPTH,
                               "world_size": world, "ddp": variant == "good"})
