"""Hidden sync: reading the loss (``.item()``) and a metric (``.cpu()``) every step.

The step is GPU-bound (its kernels take longer than the CPU needs to launch them and do its
per-step work), as a training step should be. Each read blocks the CPU until the GPU drains,
so the per-step CPU work (standing in for a real loop's logging and bookkeeping) can no longer
overlap GPU work: the GPU idles while it runs, every step. The good variant accumulates on the
device and reads back every ``SYNC_EVERY`` steps.
"""

from __future__ import annotations

from .base import Built, busy_cpu, check_variant, linear_gelu_stack

SYNC_EVERY = 50
BATCH, WIDTH, DEPTH, CLASSES = 16384, 4096, 4, 1000
CPU_WORK_S = 0.003


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    model = nn.Sequential(*linear_gelu_stack(WIDTH, DEPTH), nn.Linear(WIDTH, CLASSES)).to(dev, dt)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(BATCH, WIDTH, device=dev, dtype=dt)
    y = torch.randint(0, CLASSES, (BATCH,), device=dev)
    state = {"i": 0, "loss_sum": torch.zeros((), device=dev), "log": []}

    def train() -> torch.Tensor:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return logits, loss

    def step_bad() -> None:
        logits, loss = train()
        acc = (logits.argmax(1) == y).float().mean().cpu()  # sync 1
        state["log"].append((loss.item(), float(acc)))  # sync 2
        busy_cpu(CPU_WORK_S)

    def step_good() -> None:
        logits, loss = train()
        state["loss_sum"] += loss.detach()
        state["i"] += 1
        if state["i"] % SYNC_EVERY == 0:  # one read-back every SYNC_EVERY steps
            state["log"].append(state["loss_sum"].item() / SYNC_EVERY)
            state["loss_sum"].zero_()
        busy_cpu(CPU_WORK_S)

    return Built(
        step_bad if variant == "bad" else step_good,
        params={"batch": BATCH, "width": WIDTH, "depth": DEPTH, "dtype": "bf16",
                "cpu_work_ms": CPU_WORK_S * 1e3, "sync_every": 1 if variant == "bad" else SYNC_EVERY},
    )
