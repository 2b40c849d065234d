"""The roofline, the MFU metrics and the peak table (traceanalyzer/perfmodel, devices.py)."""

from __future__ import annotations

import polars as pl
import pytest

from tests.support.paths import PUBLIC, SAMPLES
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
        ("AMD Instinct MI250X", "MI250X GCD"),
        ("AMD Instinct MI250", "MI250 GCD"),
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


def _with_flops_trace():
    """An mm, a conv2d around its convolution, and a causal cuDNN attention forward, each with a
    kernel, as Kineto records them with record_shapes=True and with_flops=True."""
    from tests.support.synth import Synth

    s = Synth()
    bf16 = "c10::BFloat16"
    s.op(
        "aten::mm",
        0,
        20,
        ext=1,
        dims=[[64, 128], [128, 32]],
        types=[bf16, bf16],
        concrete=["", ""],
        flops=2 * 64 * 128 * 32,
    )
    s.kernel("nvjet_sm90_tst_mm", 5, 10, launch=2, ext=1, op="aten::mm")
    conv_dims = [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []]
    conv_flops = 2 * 8 * 32 * 32 * 3 * 3 * 3 * 16
    s.op(
        "aten::conv2d",
        30,
        30,
        ext=2,
        dims=conv_dims[:3] + [[], [], [], []],
        types=[bf16, bf16, bf16, "ScalarList", "ScalarList", "ScalarList", "Scalar"],
        concrete=["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
        flops=conv_flops,
    )
    s.op("aten::convolution", 31, 28, ext=3, dims=conv_dims, types=[bf16] * 3 + [""] * 6)
    s.kernel("sm90_xmma_fprop_implicit_gemm_bf16", 40, 10, launch=33, ext=3, op="aten::convolution")
    qkv = [2, 4, 128, 64]
    s.op(
        "aten::_scaled_dot_product_cudnn_attention",
        70,
        20,
        ext=4,
        dims=[qkv, qkv, qkv, [], [], [], [], [], []],
        types=[bf16] * 3 + [""] * 6,
        concrete=["", "", "", "", "True", "0.", "True", "False", ""],
    )
    s.kernel(
        "cudnn_generated_fort_native_sdpa_sm90",
        75,
        10,
        launch=72,
        ext=4,
        op="aten::_scaled_dot_product_cudnn_attention",
    )
    return s.trace(), conv_flops


def test_trace_flops_are_cross_checked_and_causal_attention_executes_half():
    from traceanalyzer.analysis.views import Views

    trace, conv_flops = _with_flops_trace()
    frame, summary = Views(trace).perf_model
    check = summary["trace_flops"]
    assert check["calls"] == 2 and check["ratio"] == pytest.approx(1.0)
    assert check["by_op"]["aten::conv2d"]["trace_flops"] == conv_flops  # against its convolution
    assert check["by_op"]["aten::conv2d"]["ratio"] == pytest.approx(1.0)
    assert check["by_op"]["aten::mm"]["ratio"] == pytest.approx(1.0)
    attention = frame.filter(pl.col("op_name").str.contains("attention")).row(0, named=True)
    square = 2 * 2 * 4 * 128 * 128 * (64 + 64)
    assert attention["flops"] == square  # the model FLOPs of MFU: FlopCounterMode's square
    assert attention["executed_flops"] == pytest.approx(square * (128 * 129 / 2) / 128**2)


def test_is_causal_reads_only_its_position_and_only_booleans():
    from traceanalyzer.perfmodel.formulas import is_causal

    frame = pl.DataFrame(
        {
            "name": [
                "aten::_scaled_dot_product_flash_attention",
                "aten::_scaled_dot_product_flash_attention",
                "aten::_scaled_dot_product_efficient_attention_backward",
                "aten::mm",
                "aten::_scaled_dot_product_flash_attention",
            ],
            "concrete": [
                '["", "", "", "0.", "True", "False"]',
                '["", "", "", "0.", "False", "True"]',
                '["", "", "", "", "", "", "", "", "", "0.", "", "True"]',
                '["", ""]',
                '["", "", "", "0.", "maybe\\" ]',  # not a list of plain strings
            ],
        }
    )
    out = frame.select(c=is_causal(pl.col("name"), pl.col("concrete")))["c"].to_list()
    assert out == [True, False, True, None, None]


@pytest.mark.parametrize(
    ("trace", "precision", "roof"),
    [("fp32_matmul_tf32", "tf32", 494.7), ("fp32_matmul_bad", "fp32", 66.9)],
)
def test_recorded_fp32_gemms_are_judged_by_the_math_their_kernels_ran(trace, precision, roof):
    """The H200 pair: the same float32 4096^3 mm with allow_tf32 on (cuBLAS ran
    sm90_xmma_gemm_f32f32_tf32f32_f32_...) and off (sm80_xmma_gemm_..._ffma_...)."""
    import traceanalyzer
    from tests.support.paths import SAMPLES
    from traceanalyzer.analysis.views import Views
    from traceanalyzer.analysis.window import choose_window, parse_window

    path = SAMPLES / "torch" / f"{trace}.json.gz"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in this checkout")
    views = Views(choose_window(traceanalyzer.load(path, use_cache=False), parse_window("steps")))
    table, _ = views.perf_roofline
    mm = table.filter(pl.col("name") == "aten::mm").row(0, named=True)
    assert mm["precision"] == precision and mm["compute_roof_tflops"] == roof
    assert 50 < mm["roofline_pct"] <= 100  # TF32 at 341 TFLOP/s is 69% of its roof, not 510%


NAIVE_MP = SAMPLES / "torch" / "naive_model_parallel_good.json.gz"  # one process, two H200s


@pytest.mark.skipif(not NAIVE_MP.exists(), reason="sample traces absent")
def test_mfu_of_a_process_on_two_gpus_is_against_both_peaks():
    # The model-parallel step runs its FLOPs on two H200s: against one H200's peak MFU read
    # 119.7%, more than any GPU can do.
    from traceanalyzer import analyze
    from traceanalyzer.perfmodel import metrics_of

    m = metrics_of(analyze(NAIVE_MP, use_cache=False))
    assert m["peak_tflops"] == pytest.approx(2 * 989.4)
    assert m["peak_name"] == "2 x H200 SXM dense BF16"
    assert 0 < m["mfu_pct"] < 100
    assert m["mfu_pct"] == pytest.approx(100 * m["achieved_tflops"] / m["peak_tflops"])


MI250 = PUBLIC / "kineto" / "hta_mi250_rocm.json.gz"  # "AMD Radeon Graphics", gfx 9.0, 104 CUs
VLLM_MI300 = PUBLIC / "kineto" / "tracelens_vllm_decode_cudagraph.json.gz"  # name "", gfx 9.4


def test_an_mi250_device_is_one_gcd():
    # ROCm shows each of an MI250X's two dies as a device: the card's 383 TFLOP/s and 3.3 TB/s
    # made a trace's MFU and roofline half what they are.
    gcd = peaks_of(Device(id=0, name="AMD Instinct MI250X/MI250", sm_count=110))
    assert gcd is PEAKS["MI250X GCD"] and gcd.bf16 == pytest.approx(383 / 2)
    assert gcd.hbm_gbps == pytest.approx(3276.8 / 2)
    assert peaks_of(Device(id=0, name="AMD Instinct MI250X/MI250", sm_count=104)) is PEAKS["MI250 GCD"]


@pytest.mark.skipif(not (MI250.exists() and VLLM_MI300.exists()), reason="public traces absent")
def test_amd_gpus_whose_name_does_not_say_are_known_by_their_properties():
    from traceanalyzer import analyze
    from traceanalyzer.ingest import load
    from traceanalyzer.perfmodel import metrics_of
    from traceanalyzer.report._common import device_line

    for path, key, words in (
        (MI250, "MI250 GCD", "AMD Radeon Graphics (MI250 GCD by its 104 compute units, gfx 9.0 "
                             "and 64 GiB)"),
        (VLLM_MI300, "MI300X", "GPU 2 (its name not recorded; MI300X by its 304 compute units, "
                               "gfx 9.4 and 192 GiB)"),
    ):
        device = load(path, use_cache=False).meta.devices[0]
        assert device.vendor == "amd" and peaks_of(device) is PEAKS[key]
        result = analyze(path, use_cache=False)
        assert device_line(result).startswith(words)
        m = metrics_of(result)
        assert m["peak_name"] == f"{key} dense BF16" and m["mfu_pct"] is not None


V100 = PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz"  # Tesla V100-SXM2-16GB


def test_a_v100_is_judged_against_its_fp16_tensor_cores():
    peaks = peaks_of(Device(id=0, name="Tesla V100-SXM2-16GB"))
    assert peaks is PEAKS["V100 SXM2"] and peaks.bf16 == 125.0 and peaks.tf32 is None
    assert Roofline("Tesla V100-SXM2-16GB", peaks).peak_label == "V100 SXM2 dense FP16"
    assert peaks_of(Device(id=0, name="Tesla V100-PCIE-32GB")) is PEAKS["V100 PCIe"]
    assert peaks_of(Device(id=0, name="Tesla V100S-PCIE-32GB")) is PEAKS["V100S PCIe"]


@pytest.mark.skipif(not V100.exists(), reason="public traces absent")
def test_mfu_on_a_real_v100_trace():
    # HTA's V100 trace read "MFU: no peak known for Tesla V100-SXM2-16GB", and the two roofline
    # rules were not applicable for the same reason.
    from traceanalyzer import analyze
    from traceanalyzer.perfmodel import metrics_of

    result = analyze(V100, use_cache=False)
    m = metrics_of(result)
    assert m["peak_name"] == "V100 SXM2 dense FP16" and m["mfu_pct"] is not None
    outcomes = {o.slug: o for o in result.rule_outcomes}
    assert outcomes["gemm-below-roofline"].status != "not_applicable"
