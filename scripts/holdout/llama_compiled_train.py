"""The same Llama-style training step as llama_eager_train.py, with the model wrapped in
torch.compile (default mode): Inductor fuses the spelled-out RMSNorm, rotary and SwiGLU ops."""

from __future__ import annotations

from common import profile
from llama_eager_train import setup

if __name__ == "__main__":
    profile("llama_compiled_train", setup(compile_model=True), warmup_steps=5)
