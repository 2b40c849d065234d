"""unfused-optimizer on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import Synth, busy_loop, run


def test_unfused_optimizer_fires_on_per_parameter_kernels():
    s = Synth()
    s.annotation("Optimizer.step#AdamW.step", 0, 2000)
    for i in range(80):
        s.kernel("vectorized_elementwise_kernel<add_>", 10 + i * 20, 4, launch=5 + i * 20)
    f = run(s)[0]["unfused-optimizer"]
    # One step: "launched 80 kernels each" read as if there were several.
    assert ("1 optimizer step (Optimizer.step#AdamW.step) with 80 kernels per step "
            "(0 multi-tensor) took") in f.message
    assert "Optimizer.step#AdamW.step" in f.message


def test_unfused_optimizer_quiet_for_foreach_and_na_without_optimizer():
    s = Synth()
    s.annotation("Optimizer.step#AdamW.step", 0, 200)
    for i in range(4):
        s.kernel("multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>", 10 + i * 40, 35,
                 launch=5 + i * 5)
    _, outcomes = run(s)
    assert outcomes["unfused-optimizer"].status == "quiet"
    s = Synth()
    busy_loop(s, n=3)
    assert run(s)[1]["unfused-optimizer"].status == "not_applicable"


def test_unfused_optimizer_without_ranges_from_adam_kernels():
    # An Nsight Systems trace has no Optimizer.step range: the per-parameter Adam kernels
    # (lerp, addcmul, addcdiv, one each per parameter) still show the unfused step.
    s = Synth()
    s.step(0, 0, 5000)
    t = 10.0
    for _ in range(30):  # 30 parameters
        for name in ("vectorized_elementwise_kernel<mul>", "lerp_kernel_scalar_weight",
                     "vectorized_elementwise_kernel<mul>", "addcmul_cuda_kernel",
                     "vectorized_elementwise_kernel<sqrt>", "addcdiv_cuda_kernel"):
            s.kernel(name, t, 4, launch=t - 8)
            t += 15
    f = run(s)[0]["unfused-optimizer"]
    assert "no optimizer range recorded" in f.message
    s = Synth()
    s.step(0, 0, 500)
    for i in range(3):
        s.kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor, lerp>", 10 + i * 100, 90,
                 launch=5 + i)
    _, outcomes = run(s)
    assert outcomes["unfused-optimizer"].status == "quiet"
