"""tail-effect: fires on the bad kernel of its committed pair, quiet on the good twin and cuBLAS."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("kernels_b_raw.csv.gz", "tail-effect")
    assert finding is not None
    assert kernels(finding) == ["ta_tail_effect"]
    assert "265 blocks in 1.00 waves, so 50% of the SMs' time is idle" in finding.message
    assert abs(finding.impact_ns - 3_812_768 * (2 - 265 / 264) / 2) <= 1


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "tail-effect")
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome("kernels_b_raw.csv.gz", "tail-effect", min_idle_pct=60)
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "tail-effect")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason


def test_the_details_page_gives_the_same_verdict() -> None:
    # the details page rounds (3.81 ms) but has the grid and the occupancy limits
    finding, _ = outcome("kernels_b_details.csv.gz", "tail-effect")
    assert finding is not None and kernels(finding) == ["ta_tail_effect"]
