"""gemm-below-roofline on small synthetic traces."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.paths import PUBLIC
from tests.support.synth import US, Synth, run

DIMS = [[4096, 4096], [4096, 4096]]
TYPES = ["c10::BFloat16", "c10::BFloat16"]
FLOPS = 2 * 4096**3
AT_ROOF_US = FLOPS / 989.4e12 * 1e6  # the H200's dense BF16 peak: 139 µs


def build(kernel_us: float, *, dims: object = DIMS, name: str = "NVIDIA H200") -> Synth:
    s = Synth()
    s.devices = [dataclasses.replace(s.devices[0], name=name)]
    t = 0.0
    for i in range(8):
        s.op("aten::mm", t, 20, ext=100 + i, dims=dims, types=TYPES)
        s.kernel(
            "nvjet_sm90_tst_128x256_gemm",
            t + 30,
            kernel_us,
            launch=t + 5,
            ext=100 + i,
            op="aten::mm",
        )
        t += kernel_us + 40
    return s


def test_fires_on_a_slow_gemm_with_the_time_a_roofline_kernel_saves():
    findings, _ = run(build(1000))
    f = findings["gemm-below-roofline"]
    assert f.impact_ns == pytest.approx(8 * (1000 - AT_ROOF_US) * US, rel=1e-6)
    assert "1 GEMM shape" in f.message and "aten::mm [[4096, 4096], [4096, 4096]]" in f.message
    assert "at 137 TFLOP/s, 14% of 989" in f.message
    row = f.evidence[0]
    assert row["roofline_pct"] == pytest.approx(100 * AT_ROOF_US / 1000, abs=1e-3)


def test_quiet_near_the_roofline_and_threshold_changes_the_verdict():
    assert "gemm-below-roofline" not in run(build(180))[0]  # 77% of the roofline
    fired = run(build(180), **{"gemm-below-roofline": {"max_roofline_pct": 90}})[0]
    assert "gemm-below-roofline" in fired


def test_not_applicable_without_shapes_or_peaks():
    _, outcomes = run(build(1000, dims=None))
    assert outcomes["gemm-below-roofline"].status == "not_applicable"
    assert "record_shapes" in outcomes["gemm-below-roofline"].reason
    _, outcomes = run(build(1000, name="Mystery Accelerator 9000"))
    assert outcomes["gemm-below-roofline"].status == "not_applicable"
    assert "Mystery Accelerator 9000" in outcomes["gemm-below-roofline"].reason


FP32 = ["float", "float"]
TF32_KERNEL = "nvjet_sm90_tss_256x128_64x4_1x2_h_bz_coopA_NNT"
FFMA_KERNEL = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_ffma_aligna4"


def fp32_build(kernel_us: float, kernel: str) -> Synth:
    s = Synth()
    t = 0.0
    for i in range(8):
        s.op("aten::mm", t, 20, ext=100 + i, dims=DIMS, types=FP32)
        s.kernel(kernel, t + 30, kernel_us, launch=t + 5, ext=100 + i, op="aten::mm")
        t += kernel_us + 40
    return s


def test_an_fp32_gemm_on_tf32_tensor_cores_is_judged_against_the_tf32_peak():
    # 1000 µs: 137 TFLOP/s, twice the FP32 peak (66.9) but 28% of the TF32 one (494.7).
    f = run(fp32_build(1000, TF32_KERNEL))[0]["gemm-below-roofline"]
    assert f.evidence[0]["precision"] == "tf32"
    assert f.evidence[0]["roof_tflops"] == pytest.approx(494.7)
    assert f.impact_ns == pytest.approx(8 * (1000 - FLOPS / 494.7e12 * 1e6) * US, abs=8)
    # The same time on the CUDA cores' kernel would be beyond the FP32 roof: nothing to find.
    assert "gemm-below-roofline" not in run(fp32_build(1000, FFMA_KERNEL))[0]
    # On the CUDA cores at 2700 µs: 51 TFLOP/s, 76% of the FP32 roof.
    assert "gemm-below-roofline" not in run(fp32_build(2700, FFMA_KERNEL))[0]


MI300X = PUBLIC / "kineto" / "tracelens_torch_compile_triton.json.gz"


@pytest.mark.skipif(not MI300X.exists(), reason="public traces absent")
def test_advice_on_an_amd_gpu_names_its_libraries():
    # TraceLens' MI300X trace: the fix said "tensor cores", TF32 and "another cuBLASLt heuristic".
    from traceanalyzer import analyze

    f = {f.slug: f for f in analyze(MI300X, use_cache=False).findings}["gemm-below-roofline"]
    assert "hipBLASLt" in f.fix and "matrix cores" in f.fix
    assert "cuBLAS" not in f.fix and "tensor cores" not in f.fix
