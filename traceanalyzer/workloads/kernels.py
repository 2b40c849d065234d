"""Triton kernels for the fused variants (imports triton: import this module lazily).

``swiglu_kernel``/``swiglu`` are the seed note's fused ``silu(gate) * up``, verbatim.
``swiglu_bias_gelu_residual`` fuses a whole MLP epilogue, ``gelu_tanh(silu(g) * u + bias) + res``,
into one pass: 4 tensor reads and 1 write instead of the 5 kernels and 13 passes eager needs.
Both run on CPU tensors under ``TRITON_INTERPRET=1``, which is how CI checks them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# gelu_tanh(h) = 0.5 h (1 + tanh(c (h + 0.044715 h^3))) = h * sigmoid(2c (h + 0.044715 h^3)),
# c = sqrt(2/pi): the sigmoid form needs no tanh, which Triton's core language lacks.
GELU_2C = 1.5957691216057308


@triton.jit
def swiglu_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)                      # which block of elements this program handles
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n                                  # guard the ragged last block
    g = tl.load(gate_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask).to(tl.float32)
    out = g * tl.sigmoid(g) * u                      # silu(g) * u, computed in registers
    tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    assert gate.is_contiguous() and up.is_contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    swiglu_kernel[(triton.cdiv(n, 1024),)](gate, up, out, n, BLOCK=1024)
    return out


@triton.jit
def swiglu_bias_gelu_residual_kernel(
    gate_ptr, up_ptr, bias_ptr, res_ptr, out_ptr, n, n_cols, BLOCK: tl.constexpr
):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(gate_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(bias_ptr + offs % n_cols, mask=mask).to(tl.float32)  # bias broadcast over rows
    r = tl.load(res_ptr + offs, mask=mask).to(tl.float32)
    h = g * tl.sigmoid(g) * u + b
    y = h * tl.sigmoid(1.5957691216057308 * (h + 0.044715 * h * h * h)) + r
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def swiglu_bias_gelu_residual(
    gate: torch.Tensor, up: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor,
    block: int = 1024,
) -> torch.Tensor:
    """``gelu(silu(gate) * up + bias, approximate="tanh") + residual`` in one kernel."""
    assert gate.shape == up.shape == residual.shape and bias.shape == gate.shape[-1:]
    assert gate.is_contiguous() and up.is_contiguous() and residual.is_contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    swiglu_bias_gelu_residual_kernel[(triton.cdiv(n, block),)](
        gate, up, bias.contiguous(), residual, out, n, gate.shape[-1], BLOCK=block
    )
    return out

