"""unfused-elementwise-chain on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, run


def _elementwise(s: Synth, chain: bool) -> None:
    t = 0.0
    for i in range(6):
        if not chain:
            s.kernel("sm90_xmma_gemm_bf16", t, 50, launch=t - 10)
            t += 52
        s.kernel(f"vectorized_elementwise_kernel<4, mul_{i}>", t, 50, launch=t - 10,
                 grid=(4096, 1, 1), block=(128, 1, 1))
        t += 52


def test_unfused_elementwise_chain_fires_on_a_run():
    s = Synth()
    _elementwise(s, chain=True)
    findings, _ = run(s)
    f = findings["unfused-elementwise-chain"]
    assert "longest 6" in f.message
    # no shapes: 2.5 HBM passes a kernel (15), fusion saves 2 per link (10)
    assert f.impact_ns == 6 * 50 * US * 10 // 15
    assert f.evidence[0]["kernels_in_chain"] == 6


def test_unfused_elementwise_chain_quiet_when_interleaved():
    s = Synth()
    _elementwise(s, chain=False)
    assert "unfused-elementwise-chain" not in run(s)[0]


def test_unfused_elementwise_chain_skips_generated_kernels():
    # One fused Triton kernel per layer, six layers in a row: already fused, not a chain.
    s = Synth()
    for i in range(6):
        s.kernel("swiglu_bias_gelu_residual_kernel", i * 52, 50, launch=i * 52 - 10,
                 api="cuLaunchKernel")
    assert "unfused-elementwise-chain" not in run(s)[0]
    s = Synth()
    for i in range(6):
        s.kernel(f"triton_poi_fused_add_mul_{i}", i * 52, 50, launch=i * 52 - 10)
    assert "unfused-elementwise-chain" not in run(s)[0]


def test_unfused_elementwise_chain_counts_passes_from_shapes():
    # silu(gate) * up + bias -> gelu -> + residual: 2 + 3 + 2 + 2 + 3 = 12 passes over 64 MiB
    # tensors; fused, the 4 links save 8 of them.
    s = Synth()
    full = [4096, 8192]
    ops = [("aten::silu", [full]), ("aten::mul", [full, full]), ("aten::add", [full, [8192]]),
           ("aten::gelu", [full]), ("aten::add", [full, full])]
    for i, (op, dims) in enumerate(ops):
        s.op(op, i * 60, 10, ext=i + 1, dims=dims, types=["c10::BFloat16"] * len(dims))
        s.kernel(f"vectorized_elementwise_kernel<8, {op}>", 100 + i * 52, 50, ext=i + 1,
                 launch=i * 60 + 2, grid=(4096, 1, 1), block=(128, 1, 1))
    f = run(s)[0]["unfused-elementwise-chain"]
    assert f.impact_ns == 5 * 50 * US * 8 // 12
    assert f.evidence[0]["tensor_bytes"] == 4096 * 8192 * 2
    gb = 4096 * 8192 * 2 / 1e9
    assert f"HBM traffic {12 * gb:.2f} GB now against {4 * gb:.2f} GB fused" in f.message
