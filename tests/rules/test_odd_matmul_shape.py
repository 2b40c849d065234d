"""odd-matmul-shape on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, busy_loop, run

ALIGN1 = "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>"


ALIGN2 = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>"


NVJET = "nvjet_sm90_tst_256x144_64x4_2x1_v_bz_coopA_TNT"


def _gemm_ops(s: Synth, dims: list[list[int]], n: int = 5,
              kernel: str = "sm90_xmma_gemm_bf16bf16") -> None:
    for i in range(n):
        s.op("aten::mm", i * 300, 20, ext=i + 1, dims=dims, types=["c10::BFloat16"] * 2)
        s.kernel(kernel, i * 300 + 30, 250, ext=i + 1, launch=i * 300 + 5)


def test_odd_matmul_shape_fires_on_unaligned_dims():
    # cuBLAS fell back to an align1 kernel for the unaligned N: padding saves most of its time
    # (73-84% measured on an H200, scripts/measure/gemm_padding_h200.json).
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50257]], kernel=ALIGN1)
    f = run(s)[0]["odd-matmul-shape"]
    assert "M=4096 N=50257 K=768" in f.message
    assert f.evidence[0]["odd_dims"] == "N"
    assert f.impact_ns == int(5 * 250 * US * 0.75)


def test_odd_matmul_shape_counts_less_for_an_align2_kernel():
    # N a multiple of 2 or 4, not 8: an sm80 align2 kernel, 59-63% saved by padding (measured).
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50260]], kernel=ALIGN2)
    assert run(s)[0]["odd-matmul-shape"].impact_ns == int(5 * 250 * US * 0.60)


def test_odd_matmul_shape_quiet_on_an_unaligned_m_in_a_fast_kernel():
    # M (batch x sequence) is not a leading dimension: cuBLAS keeps its sm90 kernels, and padding
    # M saved nothing measurable on an H200 (-5 to +6%).
    s = Synth()
    _gemm_ops(s, [[4095, 4096], [4096, 4096]], kernel=NVJET)
    findings, outcomes = run(s)
    assert "odd-matmul-shape" not in findings and outcomes["odd-matmul-shape"].status == "quiet"


def test_odd_matmul_shape_counts_the_last_tile_when_the_kernel_kept_up():
    # N aligned to 8 but not 64, in the fast kernel: only the last tile's unused part is lost.
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50200]], kernel=NVJET)
    f = run(s, **{"odd-matmul-shape": {"min_impact_pct": 0}})[0]["odd-matmul-shape"]
    assert f.impact_ns == int(5 * 250 * US * (50240 - 50200) / 50240)


def test_odd_matmul_shape_quiet_when_aligned_and_na_without_shapes():
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50304]])
    findings, outcomes = run(s)
    assert "odd-matmul-shape" not in findings and outcomes["odd-matmul-shape"].status == "quiet"
    s = Synth()
    busy_loop(s, n=5)
    _, outcomes = run(s)
    assert outcomes["odd-matmul-shape"].status == "not_applicable"
    assert outcomes["odd-matmul-shape"].reason.startswith("input shapes were not recorded")


def test_odd_matmul_shape_from_kernel_names_without_shapes():
    # Nsight Systems records no shapes; cuBLAS's fallback to an alignment-1 kernel still shows it.
    s = Synth()
    for i in range(5):
        s.kernel("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1>(T1::Params)",
                 i * 300, 250, launch=i * 300 - 10)
    f = run(s)[0]["odd-matmul-shape"]
    assert "align1" in f.message and f.impact_ns == int(5 * 250 * US * 0.75)
    for name in ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_ffma_aligna4_alignc4_execute_kernel",
                 "cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>"):  # FP32: any layout
        s = Synth()
        busy_loop(s, n=5, name=name)
        assert run(s)[1]["odd-matmul-shape"].status == "not_applicable"
