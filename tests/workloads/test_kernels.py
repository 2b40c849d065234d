"""The workloads' Triton kernels against eager PyTorch, on CPU with ``TRITON_INTERPRET=1``.

CI installs torch's CPU wheel and triton so these run (see .ci/run); skipped where either is missing.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest

torch = pytest.importorskip("torch")
F = pytest.importorskip("torch.nn.functional")


@pytest.fixture(scope="module")
def kernels():  # type: ignore[no-untyped-def]
    """The kernels module, imported (again) with the interpreter on: @triton.jit reads
    TRITON_INTERPRET when it decorates."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        pytest.importorskip("triton")
        name = "traceanalyzer.workloads.kernels"
        mod = importlib.reload(sys.modules[name]) if name in sys.modules else \
            importlib.import_module(name)
        yield mod
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def _inputs(rows: int, cols: int, dtype):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731
    return mk(rows, cols), mk(rows, cols), mk(cols) * 0.1, mk(rows, cols)


# sizes that are not multiples of the block, and a bias row that does not divide it
SHAPES = [(1, 1), (3, 7), (37, 300), (8, 1024), (5, 1500)]


@pytest.mark.parametrize("rows,cols", SHAPES)
def test_note_swiglu_kernel_matches_eager(kernels, rows: int, cols: int) -> None:
    gate, up, _, _ = _inputs(rows, cols, torch.float32)
    torch.testing.assert_close(kernels.swiglu(gate, up), F.silu(gate) * up,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("block", [128, 1024])
def test_fused_epilogue_matches_eager_fp32(kernels, rows: int, cols: int, block: int) -> None:
    from traceanalyzer.workloads.unfused_elementwise import eager_epilogue

    gate, up, bias, res = _inputs(rows, cols, torch.float32)
    out = kernels.swiglu_bias_gelu_residual(gate, up, bias, res, block=block)
    torch.testing.assert_close(out, eager_epilogue(gate, up, bias, res), rtol=1e-5, atol=1e-5)


def test_fused_epilogue_in_bf16_is_at_least_as_close_as_eager_bf16(kernels) -> None:
    """The fused kernel keeps fp32 in registers; eager rounds to bf16 after each op."""
    from traceanalyzer.workloads.unfused_elementwise import eager_epilogue

    gate, up, bias, res = _inputs(64, 640, torch.float32)
    exact = eager_epilogue(gate, up, bias, res)
    b16 = [t.bfloat16() for t in (gate, up, bias, res)]
    fused = kernels.swiglu_bias_gelu_residual(*b16).float()
    eager = eager_epilogue(*b16).float()
    assert fused.dtype == eager.dtype == torch.float32
    err_fused = (fused - exact).abs().max().item()
    err_eager = (eager - exact).abs().max().item()
    assert err_fused <= err_eager + 1e-6
    torch.testing.assert_close(fused, exact, rtol=2e-2, atol=5e-2)


def test_fused_epilogue_rejects_mismatched_shapes(kernels) -> None:
    gate, up, bias, res = _inputs(4, 16, torch.float32)
    with pytest.raises(AssertionError):
        kernels.swiglu_bias_gelu_residual(gate, up[:, :8].contiguous(), bias, res)
