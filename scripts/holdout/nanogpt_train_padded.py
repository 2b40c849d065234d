"""nanogpt_train.py with the vocabulary padded to 50304, a multiple of 64, as nanoGPT does
("the single most important change": the output layer's GEMMs get aligned shapes)."""

from __future__ import annotations

from common import profile
from nanogpt_train import setup

if __name__ == "__main__":
    profile("nanogpt_train_padded", setup(50304))
