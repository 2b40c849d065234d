"""Unoverlapped NCCL: gradients all-reduced one by one after backward.

bad: backward finishes, then every gradient is all-reduced in turn (``dist.all_reduce`` blocks
the compute stream until it is done): the GPU computes nothing while NCCL runs.
good: DistributedDataParallel's buckets all-reduce on NCCL's stream while backward is still
computing the earlier layers' gradients; only the last bucket is left after backward.

Communication only matters when it is a real share of the step. Two GPUs on NVLink all-reduce
a layer's 32 MB gradient in ~0.15 ms; the GEMMs of that layer take as long only at a batch so
small that the step becomes CPU-bound under a profiler. So NCCL is limited to one channel
(``NCCL_MAX_NCHANNELS=1``, unless set otherwise), standing in for the slower inter-node network
of a multi-node job, and the batch is sized at build time so that one layer's backward takes
about twice as long as the all-reduce of its gradient (measured: one GEMM and one 32 MB
all-reduce). At that ratio overlap hides the communication, and its absence costs about a
fifth of the step. ``TA_NCCL_BATCH`` pins the batch (so that separate runs of the two variants
use the same one).

Needs 2+ GPUs, one process each: ``torchrun --nproc-per-node N traceanalyzer/workloads/run.py
nccl_overlap --variant bad --profiler torch --out DIR`` (one trace per rank).
"""

from __future__ import annotations

import os

from .base import Built, check_variant, linear_gelu_stack, time_steps

WIDTH, DEPTH = 4096, 16
PROBE_BATCH = 8192
MIN_BATCH, MAX_BATCH, BATCH_STEP = 2048, 65536, 1024
NCCL_CHANNELS = 1
_chosen: dict[str, object] = {}


def _timed_ms(fn, iters: int = 10) -> float:
    for _ in range(3):  # cuBLAS heuristics, NCCL's first collective
        fn()
    return time_steps(fn, iters)[0]


def choose_batch() -> dict[str, object]:
    """The batch at which one layer's GEMM takes as long as the all-reduce of its weight
    gradient (so its backward, two GEMMs, takes twice as long); the same on every rank."""
    if _chosen:
        return _chosen
    import torch
    import torch.distributed as dist

    dev, dt = "cuda", torch.bfloat16
    w = torch.randn(WIDTH, WIDTH, device=dev, dtype=dt)
    a = torch.randn(PROBE_BATCH, WIDTH, device=dev, dtype=dt)
    g = torch.randn(WIDTH, WIDTH, device=dev, dtype=dt)
    mm_ms = _timed_ms(lambda: a @ w)
    comm_ms = _timed_ms(lambda: dist.all_reduce(g))
    pinned = os.environ.get("TA_NCCL_BATCH")
    if pinned:
        batch = int(pinned)
    else:
        rows = PROBE_BATCH * comm_ms / mm_ms
        batch = int(min(MAX_BATCH, max(MIN_BATCH, round(rows / BATCH_STEP) * BATCH_STEP)))
    agreed = torch.tensor([batch], device=dev)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
    _chosen.update(batch=int(agreed.item()), probe_gemm_ms=round(mm_ms, 4),
                   probe_allreduce_32mb_ms=round(comm_ms, 4))
    return _chosen


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch
    import torch.distributed as dist
    from torch import nn

    if not dist.is_initialized() or dist.get_world_size() < 2:
        raise RuntimeError("nccl_overlap needs torch.distributed with 2+ ranks (use torchrun)")
    # read by NCCL when the communicator is made, at the first collective (choose_batch's)
    os.environ.setdefault("NCCL_MAX_NCHANNELS", str(NCCL_CHANNELS))
    sizing = choose_batch()
    batch = int(sizing["batch"])  # type: ignore[call-overload]
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    model: nn.Module = nn.Sequential(*linear_gelu_stack(WIDTH, DEPTH)).to(dev, dt)
    x = torch.randn(batch, WIDTH, device=dev, dtype=dt)
    world = dist.get_world_size()

    if variant == "good":
        # gradients as views into the buckets: no copy back after the all-reduce
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25,
                                                    gradient_as_bucket_view=True)
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

    return Built(step, params={"batch": batch, "width": WIDTH, "depth": DEPTH,
                               "world_size": world, "ddp": variant == "good",
                               "nccl_max_nchannels": os.environ.get("NCCL_MAX_NCHANNELS"),
                               "grad_mb": round(sum(p.numel() for p in model.parameters()) * 2
                                                / 2**20, 1),
                               **{k: v for k, v in sizing.items() if k != "batch"}})
