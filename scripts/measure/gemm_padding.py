"""What padding an unaligned GEMM saves on this GPU: the measurement behind odd-matmul-shape's
``expected_gain_pct`` and ``fallback_gain_pct`` (rules/odd-matmul-shape.yaml).

Each case times a bf16 GEMM as a model calls it (``F.linear`` with a weight of N x K, or
``torch.bmm`` with the operands attention passes) at an unaligned shape and at the same shape
padded, and records the kernel cuBLAS ran for each. The saving is what a user who pads gets:
1 - t(padded) / t(unpadded), padded work included.

    python scripts/measure/gemm_padding.py OUT.json      # needs a CUDA GPU and torch
"""

from __future__ import annotations

import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

DTYPE = torch.bfloat16
# (label, op, unpadded (batch, M, N, K), padded): M is batch x sequence (data), N and K the
# model's dimensions; the names of the cases say which one is unaligned.
CASES = [
    ("M odd (8191), linear 4096x4096", "linear", (1, 8191, 4096, 4096), (1, 8192, 4096, 4096)),
    ("M odd (5185 tokens), linear 3072x768", "linear", (1, 5185, 3072, 768), (1, 5248, 3072, 768)),
    ("M odd (8 x 5185 tokens), linear 3072x768", "linear", (1, 41480, 3072, 768),
     (1, 41536, 3072, 768)),
    ("M odd (4095), linear 4096x4096", "linear", (1, 4095, 4096, 4096), (1, 4096, 4096, 4096)),
    ("N odd (vocabulary 50257), linear", "linear", (1, 8192, 50257, 768), (1, 8192, 50304, 768)),
    ("N x8 not x64 (50264), linear", "linear", (1, 8192, 50264, 768), (1, 8192, 50304, 768)),
    ("N x4 not x8 (50260), linear", "linear", (1, 8192, 50260, 768), (1, 8192, 50304, 768)),
    ("N x2 not x4 (50258), linear", "linear", (1, 8192, 50258, 768), (1, 8192, 50304, 768)),
    ("K odd (4095), linear", "linear", (1, 8192, 4096, 4095), (1, 8192, 4096, 4096)),
    ("K x4 not x8 (4092), linear", "linear", (1, 8192, 4096, 4092), (1, 8192, 4096, 4096)),
    ("K x8 not x64 (4104), linear", "linear", (1, 8192, 4096, 4104), (1, 8192, 4096, 4160)),
    ("attention scores, 16 heads, L=5185 (q @ k^T)", "scores", (16, 5185, 5185, 64),
     (16, 5248, 5248, 64)),
    ("attention output, 16 heads, L=5185 (p @ v)", "pv", (16, 5185, 64, 5185),
     (16, 5248, 64, 5248)),
]


def operands(op: str, b: int, m: int, n: int, k: int) -> tuple:
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=DTYPE, generator=g)

    if op == "linear":
        return rand(m, k), rand(n, k)  # x, weight: x @ weight^T
    if op == "scores":
        return rand(b, m, k), rand(b, n, k)  # q, k: q @ k^T (a transposed view, as SDPA-less code)
    return rand(b, m, k), rand(b, k, n)  # p, v


def run(op: str, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if op == "linear":
        return F.linear(a, w)
    if op == "scores":
        return torch.bmm(a, w.transpose(1, 2))
    return torch.bmm(a, w)


def time_ms(op: str, a: torch.Tensor, w: torch.Tensor, reps: int = 7, iters: int = 30) -> float:
    for _ in range(10):
        run(op, a, w)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            run(op, a, w)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def kernels(op: str, a: torch.Tensor, w: torch.Tensor) -> list[str]:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(op, a, w)
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def main(out: str) -> None:
    rows = []
    for label, op, unpadded, padded in CASES:
        row: dict = {"case": label, "op": op}
        for tag, (b, m, n, k) in (("unpadded", unpadded), ("padded", padded)):
            a, w = operands(op, b, m, n, k)
            row[tag] = {"b": b, "m": m, "n": n, "k": k, "ms": time_ms(op, a, w),
                        "kernels": kernels(op, a, w)}
            del a, w
            torch.cuda.empty_cache()
        row["saving_pct"] = 100 * (1 - row["padded"]["ms"] / row["unpadded"]["ms"])
        rows.append(row)
        print(f"{label:48s} {row['unpadded']['ms']:8.3f} ms -> {row['padded']['ms']:8.3f} ms "
              f"saving {row['saving_pct']:5.1f}%  {row['unpadded']['kernels'][0][:70]}", flush=True)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "dtype": str(DTYPE)}
    with open(out, "w") as fh:
        json.dump({"info": info, "cases": rows}, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
