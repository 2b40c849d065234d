"""fp32-matmul on small synthetic traces, and its advice on real traces of three GPU kinds."""

from __future__ import annotations

import functools

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from tests.support.synth import US, Synth, busy_loop, run
from traceanalyzer.model import Device


def test_fp32_matmul_fires_by_kernel_name_and_by_input_types():
    s = Synth()
    busy_loop(s, n=5, name="ampere_sgemm_128x64_nn")
    f = run(s)[0]["fp32-matmul"]
    assert "ampere_sgemm_128x64_nn" in f.message and f.impact_ns == 5 * 200 * US // 2
    s = Synth()
    for i in range(5):
        s.op("aten::mm", i * 300, 20, ext=i + 1, dims=[[64, 64], [64, 64]], types=["float", "float"])
        s.kernel("cutlass::Kernel2<cutlass_80_tensorop_gemm>", i * 300 + 30, 200, ext=i + 1,
                 launch=i * 300 + 5)
    f = run(s)[0]["fp32-matmul"]
    assert "aten::mm" in f.message


def test_fp32_matmul_quiet_for_bf16_and_not_applicable_without_tensor_cores():
    s = Synth()
    busy_loop(s, n=5)
    assert "fp32-matmul" not in run(s)[0]
    # cuBLAS's GEMV kernels: the same name stem for every type, the types spelled out.
    s = Synth()
    busy_loop(s, n=5, name="void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, "
              "__nv_bfloat16, float, 128, 16, 4, 4, false, false>")
    assert "fp32-matmul" not in run(s)[0]
    s = Synth()
    busy_loop(s, n=5, name="void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, "
              "4, 4, false, false>")
    assert "fp32-matmul" in run(s)[0]
    s = Synth(cc="6.1")
    busy_loop(s, n=5, name="maxwell_sgemm_128x64_nn")
    _, outcomes = run(s)
    assert outcomes["fp32-matmul"].status == "not_applicable"


# --- advice that fits the device ------------------------------------------------------------------

#: Recommendations that do not hold before compute capability 8.0 (no BF16, no TF32 tensor cores).
AMPERE_ONLY = (r"allow_tf32 = True", "set_float32_matmul_precision", "model.to(torch.bfloat16)",
               "dtype=torch.bfloat16)\n  around", "no GradScaler needed")


@functools.cache
def _real(path: str, **overrides: float):
    from traceanalyzer.analysis.views import Views
    from traceanalyzer.ingest import read_any
    from traceanalyzer.rules import RuleConfig, evaluate

    trace = PUBLIC / path if not path.startswith("sample_traces") else SAMPLES.parent / path
    if not trace.is_file():
        pytest.skip(f"{trace} is not available")
    findings, _ = evaluate(Views(read_any(trace)), RuleConfig(
        overrides={"fp32-matmul": dict(overrides)} if overrides else {}))
    return {f.slug: f for f in findings}


def _sgemm_on(device: Device):
    s = Synth()
    s.devices = [device]
    busy_loop(s, n=5, name="volta_sgemm_128x64_nn")
    return run(s)[0]["fp32-matmul"]


def test_fp32_matmul_on_a_v100_recommends_fp16_with_a_grad_scaler():
    # HTA's test trace of a V100 (compute capability 7.0): FP32 GEMMs (volta_sgemm_*).
    f = _real("kineto/hta_v100_rank_of2_test.json.gz")["fp32-matmul"]
    assert "FP16 tensor cores were available" in f.message and "BF16" not in f.message
    assert "TF32" not in f.message
    assert "torch.float16" in f.fix and "GradScaler" in f.fix
    assert not [phrase for phrase in AMPERE_ONLY if phrase in f.fix]


def test_fp32_matmul_on_an_mi250_gives_rocm_advice():
    # HTA's ROCm trace of an MI250: two small FP32 hipBLASLt GEMMs (thresholds at 0 to judge them).
    f = _real("kineto/hta_mi250_rocm.json.gz", min_gpu_time_pct=0, min_impact_pct=0)["fp32-matmul"]
    assert "matrix cores" in f.message and "tensor cores" not in f.message
    assert "ROCm" in f.fix and "bfloat16" in f.fix
    assert "allow_tf32 = True" not in f.fix and "set_float32_matmul_precision" not in f.fix


def test_fp32_matmul_on_hopper_adds_fp8():
    # The H200 reference trace (compute capability 9.0): BF16 first, FP8 as the further step.
    f = _real("sample_traces/torch/fp32_matmul_bad.json.gz")["fp32-matmul"]
    assert "BF16/FP16 tensor cores were available" in f.message
    assert "torch.bfloat16" in f.fix and "FP8" in f.fix


def test_fp32_matmul_advice_on_devices_without_a_recorded_capability():
    # An A100 (8.0): BF16 and TF32, no FP8. A GPU the trace does not describe: the rule's own
    # text, which says where devices differ.
    a100 = _sgemm_on(Device(0, "NVIDIA A100-SXM4-80GB", 108, None, "8.0", "nvidia"))
    assert "torch.bfloat16" in a100.fix and "FP8" not in a100.fix
    unknown = _sgemm_on(Device(0, None, None, None, None, "nvidia"))
    assert "Volta and Turing" in unknown.fix and "GradScaler" in unknown.fix
    turing = _sgemm_on(Device(0, "Tesla T4", 40, None, "7.5", "nvidia"))
    assert "torch.float16" in turing.fix and not [p for p in AMPERE_ONLY if p in turing.fix]
