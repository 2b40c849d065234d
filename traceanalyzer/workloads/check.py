"""Check the workloads' own kernels against eager PyTorch on the GPU (run on the GPU machine).

    python3 traceanalyzer/workloads/check.py

Checks the seed note's ``swiglu``, the fused epilogue, its ``torch.compile`` twin and the CUDA C
saxpy of ``small_grid`` (both grid sizes), and that each bad/good pair computes the same result
(attention, and sync_memcpy's synchronous against its asynchronous copies).
Prints one line per check and exits non-zero if any fails.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if __name__ == "__main__" and not __package__:  # by path: see run.py
    _here = Path(__file__).resolve().parent
    _spec = importlib.util.spec_from_file_location(
        "workloads", _here / "__init__.py", submodule_search_locations=[str(_here)]
    )
    assert _spec is not None and _spec.loader is not None
    _pkg = importlib.util.module_from_spec(_spec)
    sys.modules["workloads"] = _pkg
    _spec.loader.exec_module(_pkg)
    __package__ = "workloads"


def checks() -> list[tuple[str, bool, str]]:
    import torch
    import torch.nn.functional as F

    from . import kernels, small_grid
    from .unfused_elementwise import eager_epilogue

    out: list[tuple[str, bool, str]] = []

    def close(name: str, got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> None:
        err = (got.float() - want.float()).abs().max().item()
        ok = torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol)
        out.append((name, ok, f"max abs err {err:.3g}"))

    torch.manual_seed(0)
    for dt, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        g, u, r = (torch.randn(1023, 4097, device="cuda", dtype=dt) for _ in range(3))
        b = torch.randn(4097, device="cuda", dtype=dt) * 0.1
        ref = eager_epilogue(g.float(), u.float(), b.float(), r.float())
        close(f"swiglu {dt}", kernels.swiglu(g, u), F.silu(g.float()) * u.float(), tol, tol)
        close(f"fused epilogue {dt}", kernels.swiglu_bias_gelu_residual(g, u, b, r), ref,
              tol, 4 * tol)
        compiled = torch.compile(eager_epilogue, fullgraph=True, dynamic=False)
        close(f"torch.compile epilogue {dt}", compiled(g, u, b, r), ref, tol, 4 * tol)

    ext = small_grid.load_extension()
    x = torch.randn(1 << 20, device="cuda")
    for blocks in (small_grid.BAD_BLOCKS, 4 * torch.cuda.get_device_properties(0).multi_processor_count):
        y = torch.randn(1 << 20, device="cuda")
        want = 0.5 * x + y
        ext.saxpy_launch(x.data_ptr(), y.data_ptr(), 0.5, x.numel(), blocks, 256,
                         torch.cuda.current_stream().cuda_stream)
        close(f"saxpy grid={blocks}", y, want, 1e-6, 1e-6)

    # bad and good attention compute the same thing
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    s = (q @ k.transpose(-2, -1)) / 8.0
    s = s.masked_fill(torch.ones(256, 256, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    naive = torch.softmax(s.float(), dim=-1).to(q.dtype) @ v
    close("sdpa vs materialized attention", F.scaled_dot_product_attention(q, k, v, is_causal=True),
          naive, 2e-2, 2e-2)
    torch.cuda.synchronize()
    out.append(_sync_memcpy_same_results())
    return out


def _sync_memcpy_same_results(steps: int = 7) -> tuple[str, bool, str]:
    """sync_memcpy's bad variant (synchronous cudaMemcpy) and good one (pinned, async) return
    the same per-step results."""
    import numpy as np
    import torch

    from . import sync_memcpy

    results = {}
    for variant in ("bad", "good"):
        built = sync_memcpy.build(variant)
        for _ in range(steps):
            built.step()
        if built.close is not None:
            built.close()
        torch.cuda.synchronize()
        results[variant] = list(built.results)
        del built
    bad, good = results["bad"], results["good"]
    ok = len(bad) == len(good) == steps and bool(np.allclose(bad, good))
    return (f"sync_memcpy bad == good over {steps} steps", ok,
            f"first results {[round(r, 3) for r in bad[:3]]} vs {[round(r, 3) for r in good[:3]]}")


def main() -> int:
    results = checks()
    for name, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
