"""The roofline, the MFU metrics and the peak table (traceanalyzer/perfmodel, devices.py)."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyzer.devices import PEAKS, peaks_of
from traceanalyzer.model import Device
from traceanalyzer.perfmodel.model import PerfOptions, Roofline, perf_metrics, roofline_table

H200 = Roofline("NVIDIA H200", PEAKS["H200 SXM"])


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA H20", "H20"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI250X", "MI250X"),
        ("AMD Instinct MI210", "MI210"),
    ],
)
def test_peaks_by_recorded_name(name, key):
    assert peaks_of(Device(id=0, name=name)) is PEAKS[key]


def test_unknown_device_has_no_peaks_and_mfu_says_so():
    assert peaks_of(Device(id=0, name="Some Accelerator")) is None
    roof = Roofline("Some Accelerator", None)
    out = perf_metrics(1e12, "shapes", 10e6, roof)
    assert out["achieved_tflops"] == pytest.approx(100.0)
    assert out["mfu_pct"] is None and "Some Accelerator" in out["mfu_reason"]
    given = perf_metrics(1e12, "shapes", 10e6, Roofline("x", None, PerfOptions(peak_tflops=200)))
    assert given["mfu_pct"] == pytest.approx(50.0) and given["peak_name"] == "--peak-tflops"


def test_mfu_against_dense_bf16_and_tokens():
    out = perf_metrics(
        45e12,
        "shapes",
        92.4e6,
        Roofline("NVIDIA H200", PEAKS["H200 SXM"], PerfOptions(tokens_per_step=16384)),
    )
    assert out["peak_tflops"] == 989.4 and "dense BF16" in out["peak_name"]
    assert out["mfu_pct"] == pytest.approx(100 * 45e12 / 92.4e-3 / 1e12 / 989.4)
    assert out["tokens_per_s"] == pytest.approx(16384 / 92.4e-3)


def test_without_shapes_mfu_needs_flops_per_step():
    out = perf_metrics(None, None, 50e6, H200)
    assert out["flops_per_step"] is None and out["mfu_pct"] is None
    assert "--flops-per-step" in out["mfu_reason"]
    given = perf_metrics(
        None,
        None,
        50e6,
        Roofline("NVIDIA H200", PEAKS["H200 SXM"], PerfOptions(flops_per_step=4.947e12)),
    )
    assert given["flops_source"] == "--flops-per-step"
    assert given["mfu_pct"] == pytest.approx(10.0, rel=1e-3)


def test_roofline_bound_pct_and_lost_time():
    kernels = pl.DataFrame(
        {
            "name": ["gemm", "copy"],
            "op_class": ["gemm", "copy"],
            "precision": ["bf16", "bf16"],
            # 989.4 TFLOP in 2 s: half the roof. 4.8 GB in 4 ms: a quarter of 4800 GB/s.
            "dur_ns": [2e9, 4e6],
            "flops": [989.4e12, 0.0],
            "bytes": [1e9, 4.8e9],
        }
    )
    out = {r["name"]: r for r in roofline_table(kernels, H200, ("name",)).to_dicts()}
    assert out["gemm"]["bound"] == "compute" and out["copy"]["bound"] == "memory"
    assert out["gemm"]["roofline_pct"] == pytest.approx(50.0)
    assert out["gemm"]["lost_ns"] == pytest.approx(1e9)
    assert out["copy"]["roofline_pct"] == pytest.approx(25.0)
    assert out["copy"]["achieved_gbps"] == pytest.approx(1200.0)
    assert H200.ridge("bf16") == pytest.approx(989.4e12 / 4800e9)
    fp32 = roofline_table(kernels.with_columns(precision=pl.lit("fp32")), H200, ("name",))
    assert fp32.filter(pl.col("name") == "gemm")["compute_roof_tflops"].item() == 66.9
    # Against the bandwidth a copy reaches (90% of 4800): the copy at 1200 GB/s is 27.8% of it.
    copy = out["copy"]
    assert copy["reachable_gbps"] == pytest.approx(4320.0)
    assert copy["reachable_pct"] == pytest.approx(100 * 1200 / 4320)
    assert copy["reachable_lost_ns"] == pytest.approx(4e6 - 4.8e9 / 4320)


def test_reachable_bandwidth_is_a_share_of_the_datasheet_or_the_users_figure():
    assert PEAKS["H200 SXM"].reachable_gbps == pytest.approx(4320.0)
    assert PEAKS["H100 SXM"].reachable_gbps == pytest.approx(0.9 * 3350)
    given = Roofline("NVIDIA H200", PEAKS["H200 SXM"], PerfOptions(peak_bandwidth_gbps=4000))
    assert given.bandwidth_gbps == 4000 and given.reachable_gbps == 4000


@pytest.mark.parametrize(
    ("kernel", "precision"),
    [
        ("nvjet_sm90_tss_256x128_64x4_1x2_h_bz_coopA_NNT", "tf32"),
        ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4", "tf32"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>", "tf32"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "tf32"),
        ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_ffma_aligna4", "fp32"),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>", "fp32"),
        ("ampere_sgemm_32x32_sliced1x4_tn", "fp32"),
        ("cutlass_80_tensorop_s1688gemm_3xtf32_64x64", "fp32"),
    ],
)
def test_an_fp32_operator_on_tf32_tensor_cores_is_judged_as_tf32(kernel, precision):
    from traceanalyzer.perfmodel.formulas import kernel_precision

    frame = pl.DataFrame({"precision": ["fp32", "bf16"], "name": [kernel, kernel]})
    out = frame.select(p=kernel_precision(pl.col("precision"), pl.col("name")))["p"]
    assert out.to_list() == [precision, "bf16"]  # a bf16 operator's kernel stays bf16
    assert H200.compute_tflops(precision) == {"tf32": 494.7, "fp32": 66.9}[precision]
