"""allocator-churn on small synthetic traces: device allocations and frees inside the steps,
charged with the GPU idle from each call to the GPU's next work."""

from __future__ import annotations

import pytest

from tests.support.synth import US, Synth, run


def _step(s: Synth, t0: float, churn: bool) -> None:
    """A 2 ms step: 1 ms of GEMMs, then (with churn) empty_cache()'s cudaFree and a cudaMalloc,
    during which the GPU has nothing queued; the next kernel is launched after them."""
    s.step(int(t0 // 2000), t0, 2000)
    s.op("aten::mm", t0, 20)
    for i in range(5):
        s.kernel("gemm", t0 + 10 + i * 200, 200, launch=t0 + 1 + i * 2)
    if churn:
        s.api("cudaFree", t0 + 1100, 100)
        s.op("aten::empty", t0 + 1250, 60)
        s.api("cudaMalloc", t0 + 1255, 50)
        s.kernel("gemm", t0 + 1320, 200, launch=t0 + 1310)
    else:
        s.kernel("gemm", t0 + 1020, 200, launch=t0 + 20)


def test_allocator_churn_fires_with_the_idle_it_causes():
    s = Synth()
    for t0 in (0, 2000, 4000):
        _step(s, t0, True)
    findings, _ = run(s)
    f = findings["allocator-churn"]
    # GPU idle 1010..1320 of each step; each call's stretch runs on to the next kernel (1320):
    # 1100..1320 and 1255..1320, whose union is 220 µs
    assert f.impact_ns == 3 * 220 * US
    assert f.evidence[0]["gpu_idle_us"] == pytest.approx(220)
    assert "6 device allocation calls" in f.message
    assert "3 frees" in f.message and "aten::empty" in f.message
    assert f.evidence[0]["api"] in ("cudaFree", "cudaMalloc")


def test_allocator_churn_quiet_without_frees():
    s = Synth()
    for t0 in (0, 2000, 4000):
        _step(s, t0, False)
    s.api("cudaMalloc", 1100, 50)  # a growing cache allocates, and frees nothing
    findings, outcomes = run(s)
    assert "allocator-churn" not in findings
    assert outcomes["allocator-churn"].status == "quiet"


@pytest.mark.parametrize(("per_step", "fires"), [(1, True), (2, False)])
def test_allocator_churn_min_per_step_count(per_step: int, fires: bool):
    s = Synth()
    for t0 in (0, 2000, 4000):
        _step(s, t0, True)
    findings, _ = run(s, **{"allocator-churn": {"min_per_step_count": per_step}})
    assert ("allocator-churn" in findings) is fires


def test_allocator_churn_not_applicable_without_steps():
    s = Synth()
    s.kernel("gemm", 10, 200, launch=1)
    s.api("cudaMalloc", 300, 50)
    s.api("cudaFree", 400, 100)
    s.kernel("gemm", 600, 200, launch=590)
    _, outcomes = run(s)
    assert outcomes["allocator-churn"].status == "not_applicable"
    assert "no steps" in outcomes["allocator-churn"].reason
