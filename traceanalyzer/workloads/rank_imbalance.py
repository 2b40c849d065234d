"""Ranks out of step: uneven work per rank makes every collective wait for the slowest rank.

bad: each step one rank draws a batch twice as long as the others' (variable-length samples
packed without balancing; which rank changes from step to step). DDP's gradient all-reduces on
the others start on time and wait inside the NCCL kernels until the long rank's backward
catches up: their GPUs sit in collectives, computing nothing.
good: the same samples balanced across ranks: every rank gets the step's mean length, so the
total work per step is the same and the ranks reach their collectives together.

Communication is overlapped in both (DistributedDataParallel's buckets): what the bad variant
loses is the wait. (In the steps where a rank waits, the transfer after the wait has no compute
left beside it, so on one rank's bad traces nccl-not-overlapped fires too, just over its 5%;
balancing fixes both.) A rank's
trace shows it because the long batch moves between ranks: in the steps where a rank drew it,
its collectives wait for nothing, and that is their transfer time.

Needs 2+ GPUs, one process each: ``torchrun --nproc-per-node N traceanalyzer/workloads/run.py
rank_imbalance --variant bad --profiler torch --out DIR`` (one trace per rank).
"""

from __future__ import annotations

from .base import Built, check_variant, linear_gelu_stack

WIDTH, DEPTH = 4096, 8
BASE_ROWS = 4096  # a short batch; the long one is twice that (both multiples of 64)


def rows_of(variant: str, step: int, rank: int, world: int) -> int:
    """This rank's batch in this step: bad gives the step's long batch to one rank in turn."""
    lengths = [2 * BASE_ROWS if r == step % world else BASE_ROWS for r in range(world)]
    if variant == "bad":
        return lengths[rank]
    return sum(lengths) // world // 64 * 64  # balanced: the mean, as a multiple of 64


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch
    import torch.distributed as dist
    from torch import nn

    if not dist.is_initialized() or dist.get_world_size() < 2:
        raise RuntimeError("rank_imbalance needs torch.distributed with 2+ ranks (use torchrun)")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(*linear_gelu_stack(WIDTH, DEPTH)).to(dev, dt),
        bucket_cap_mb=25, gradient_as_bucket_view=True,
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(2 * BASE_ROWS, WIDTH, device=dev, dtype=dt)
    steps = 0

    def step() -> None:
        nonlocal steps
        rows = rows_of(variant, steps, rank, world)
        steps += 1
        # A plain mean: a loss of a few elementwise kernels would be an unfused chain of its own
        # (unfused-elementwise-chain), which is not this workload's subject.
        loss = model(x[:rows]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return Built(step, params={"width": WIDTH, "depth": DEPTH, "world_size": world,
                               "rows": [rows_of(variant, s, rank, world) for s in range(world)],
                               "ddp": True})
