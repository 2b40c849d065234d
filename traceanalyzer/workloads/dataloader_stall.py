"""Data-loading stall: the training loop builds each batch itself and copies it pageable.

bad: a DataLoader left at its defaults (``num_workers=0``, no pinning): the training process
decodes/augments every sample (slow numpy work) between steps, and the pageable batch is copied
with a synchronous ``.to("cuda")``: the GPU waits for the CPU every step.
good: a DataLoader with worker processes, pinned memory and prefetch, and ``non_blocking`` copies.
"""

from __future__ import annotations

from .base import Built, check_variant

BATCH, SIDE, CLASSES, WORKERS = 128, 96, 100, 8


class SyntheticImages:
    """Map-style data set whose ``__getitem__`` costs real CPU time, as decoding does."""

    def __len__(self) -> int:
        return 10**8

    def __getitem__(self, i: int):
        import numpy as np
        import torch

        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, size=(SIDE, SIDE, 3), dtype=np.uint8)  # "decode"
        x = img.astype(np.float32) / 255.0
        for _ in range(3):  # "augment": blur-like passes, jitter, normalise
            x = 0.25 * (np.roll(x, 1, 0) + np.roll(x, -1, 0) + np.roll(x, 1, 1) + np.roll(x, -1, 1))
        x = (x - x.mean()) / (x.std() + 1e-6)
        if i % 2:
            x = x[:, ::-1]
        chw = np.ascontiguousarray(x.transpose(2, 0, 1))
        return torch.from_numpy(chw), int(i % CLASSES)


def _model():
    import torch
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, CLASSES),
    ).to("cuda", memory_format=torch.channels_last)


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ds = SyntheticImages()

    def train(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # bad: the DataLoader defaults (num_workers=0, pin_memory=False) load every batch in the
    # training process, between steps; good: workers, pinned memory and prefetch overlap it.
    bad = variant == "bad"
    loader = torch.utils.data.DataLoader(
        ds, batch_size=BATCH, shuffle=False, drop_last=True,
        **({} if bad else {"num_workers": WORKERS, "pin_memory": True, "prefetch_factor": 2,
                           "persistent_workers": True}),
    )
    it = iter(loader)

    def step() -> None:
        x, y = next(it)
        if bad:  # pageable source: a synchronous copy
            train(x.to("cuda"), y.to("cuda"))
        else:
            train(x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True))

    def close() -> None:
        nonlocal it
        del it  # stops the workers

    # warm-up long enough for the workers to fill the prefetch queue
    return Built(step, warmup=2 if bad else 2 * WORKERS, close=close,
                 params={"batch": BATCH, "side": SIDE, "workers": 0 if bad else WORKERS,
                         "pin_memory": not bad, "prefetch_factor": None if bad else 2})
