"""fp32-matmul on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, busy_loop, run


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
