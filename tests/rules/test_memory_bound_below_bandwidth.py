"""memory-bound-below-bandwidth on small synthetic traces."""

from __future__ import annotations

import pytest

from tests.support.synth import US, Synth, run

DIMS = [[64, 1024, 1024], [64, 1024, 1024], []]
TYPES = ["c10::BFloat16", "c10::BFloat16", "Scalar"]
BYTES = 3 * 64 * 1024 * 1024 * 2  # two inputs read, one output written: 402.7 MB
AT_BANDWIDTH_US = BYTES / 4800e9 * 1e6  # 83.9 µs at the H200's 4800 GB/s


def build(kernel_us: float, *, dims: object = DIMS) -> Synth:
    s = Synth()
    t = 0.0
    for i in range(8):
        s.op("aten::add", t, 20, ext=200 + i, dims=dims, types=TYPES)
        s.kernel(
            "vectorized_elementwise_kernel<4, CUDAFunctor_add>",
            t + 30,
            kernel_us,
            launch=t + 5,
            ext=200 + i,
            op="aten::add",
        )
        t += kernel_us + 40
    return s


def test_fires_on_a_slow_memory_bound_kernel():
    findings, _ = run(build(600))
    f = findings["memory-bound-below-bandwidth"]
    assert f.impact_ns == pytest.approx(8 * (600 - AT_BANDWIDTH_US) * US, rel=1e-6)
    assert "1 memory-bound operator" in f.message and "4800 GB/s" in f.message
    assert f"at {BYTES / 600e-6 / 1e9:.0f} GB/s (14%)" in f.message
    assert f.evidence[0]["op_class"] == "elementwise"


def test_quiet_near_bandwidth_and_threshold_changes_the_verdict():
    assert "memory-bound-below-bandwidth" not in run(build(100))[0]  # 84% of the bandwidth
    over = {"memory-bound-below-bandwidth": {"max_bandwidth_pct": 90}}
    assert "memory-bound-below-bandwidth" in run(build(100), **over)[0]


def test_not_applicable_without_shapes():
    _, outcomes = run(build(600, dims=None))
    assert outcomes["memory-bound-below-bandwidth"].status == "not_applicable"
