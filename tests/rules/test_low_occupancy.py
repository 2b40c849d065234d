"""low-occupancy: fires on the bad kernel of its committed pair, quiet on the good twin and cuBLAS."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("kernels_a_raw.csv.gz", "low-occupancy")
    assert finding is not None
    assert kernels(finding) == ["ta_regs_heavy"]
    assert "limited by registers per thread (78 registers a thread)" in finding.message
    # 606 us less 70.6% (its SM Speed of Light): the busiest unit at its peak
    assert 170_000 < finding.impact_ns < 185_000


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_b_raw.csv.gz", "low-occupancy")
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "low-occupancy", max_occupancy_pct=30)
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "low-occupancy")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason


def test_the_details_page_gives_the_same_verdict() -> None:
    finding, _ = outcome("kernels_a_details.csv.gz", "low-occupancy")
    assert finding is not None and kernels(finding) == ["ta_regs_heavy"]
    assert "limited by registers per thread" in finding.message


def test_a_gemm_near_its_roofline_is_not_judged() -> None:
    # cuBLAS's FP32 GEMM holds one block a SM (12.5%) and runs its FP32 pipe at 78%, SM 88%
    finding, o = outcome("fp32_matmul_bad_raw.csv.gz", "low-occupancy")
    assert finding is None and o.status == "quiet"
