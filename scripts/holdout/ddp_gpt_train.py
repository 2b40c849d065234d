"""GPT-2 small (nanoGPT's, vocabulary padded to 50304) trained data-parallel on every GPU with
DistributedDataParallel, as its tutorial does: one process per GPU (torchrun), default
buckets, bf16 autocast, fused AdamW. Each rank writes its own torch.profiler trace.

    torchrun --standalone --nproc-per-node 2 ddp_gpt_train.py --out DIR
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from common import lm_train_step, profile
from nanogpt_train import BATCH, GPT, SEQ
from torch.nn.parallel import DistributedDataParallel

VOCAB = 50304


def main() -> None:
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = DistributedDataParallel(GPT(VOCAB).cuda(), device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
    torch.manual_seed(1 + rank)  # each rank its own batch
    ids = torch.randint(0, 50257, (BATCH, SEQ + 1), device="cuda")
    step = lm_train_step(model, opt, ids[:, :-1], ids[:, 1:], VOCAB)

    profile(f"ddp_gpt_train_rank{rank}", step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
