"""The HBM bandwidth a device reaches in practice: large copies, adds and triads, timed with CUDA
events, against the bytes each must move (read every input once, write the output once).

    python3 scripts/measure/hbm_bandwidth.py OUT.json

Prints and writes the best of 20 timed repeats of each operation in GB/s (10^9 bytes per second),
for fp32 and bf16 tensors of 1 GiB; the figures behind the reachable-bandwidth fraction of
traceanalyzer's device table (docs/perf-model.md).
"""

from __future__ import annotations

import json
import sys

import torch


def best_gbps(fn, nbytes: int, repeats: int = 20) -> float:  # type: ignore[no-untyped-def]
    """GB/s of the fastest of ``repeats`` timed calls of ``fn`` that move ``nbytes``."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return nbytes / min(times) / 1e9


def measure(dtype) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Copy, add, triad and sum of 1 GiB tensors of ``dtype``."""
    n = (1 << 30) // torch.finfo(dtype).bits * 8
    a = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    c = torch.empty_like(a)
    size = a.numel() * a.element_size()
    name = str(dtype).removeprefix("torch.")
    return {
        f"copy_{name}": best_gbps(lambda: c.copy_(a), 2 * size),
        f"add_{name}": best_gbps(lambda: torch.add(a, b, out=c), 3 * size),
        f"triad_{name}": best_gbps(lambda: torch.add(a, b, alpha=2.0, out=c), 3 * size),
        f"sum_{name}": best_gbps(lambda: a.sum(), size),
    }


def main() -> None:
    out: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    results: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        results.update(measure(dtype))
    out["gbps"] = {k: round(v, 1) for k, v in results.items()}
    props = torch.cuda.get_device_properties(0)
    out["sm_count"] = props.multi_processor_count
    print(json.dumps(out, indent=1))
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
