"""Every built-in rule at once on small synthetic traces: a well-tuned trace raises nothing,
and on any trace no impact exceeds the window and no rule crashes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.synth import Synth, run


def test_well_tuned_trace_has_no_findings():
    s = Synth()
    t = 0.0
    for step in range(4):
        s.step(step, t, 4100)
        for i in range(20):
            s.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t + i * 202,
                     200, launch=t + i * 5)
        t += 20 * 202 + 5
    findings, outcomes = run(s)
    assert findings == {}
    assert outcomes["gpu-idle-gaps"].status == "quiet"
    assert outcomes["odd-matmul-shape"].status == "not_applicable"
    assert "shapes" in outcomes["odd-matmul-shape"].reason


kernel_st = st.tuples(
    st.sampled_from(["gemm_bf16", "ampere_sgemm", "vectorized_elementwise_kernel",
                     "ncclDevKernel_AllReduce", "cunn_SoftMaxForward", "layer_norm_kernel"]),
    st.integers(0, 5000), st.integers(1, 800), st.sampled_from([7, 20]),
    st.integers(1, 300), st.integers(0, 400),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(kernel_st, min_size=1, max_size=40), st.booleans(), st.booleans())
def test_impact_never_exceeds_window(kernels, with_steps, with_sync):
    s = Synth()
    for name, start, dur, stream, blocks, lead in kernels:
        s.kernel(name, start, dur, stream=stream, grid=(blocks, 1, 1), launch=start - lead)
    if with_steps:
        s.step(0, -500, 3000)
        s.step(1, 2500, 3500)
    if with_sync:
        s.api("cudaDeviceSynchronize", 1000, 900)
        s.annotation("data_load", 0, 4000)
    run(s)  # run() checks impact <= window, pct <= 100, sorted, and that no rule crashed
