"""memory-bound-below-roofline: fires on the bad kernel of its committed pair, quiet on the good twin and cuBLAS."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("kernels_a_raw.csv.gz", "memory-bound-below-roofline")
    assert finding is not None
    assert kernels(finding) == ["ta_copy_strided"]
    # the coalesced twin is at 51% of its roofline: not judged; in report b only the
    # conflicting transpose (23%) is, not the padded one (50%) nor cuBLAS
    finding_b, _ = outcome("kernels_b_raw.csv.gz", "memory-bound-below-roofline")
    assert kernels(finding_b) == ["ta_transpose_conflicts"]
    assert 1_960_000 < finding.impact_ns < 1_990_000  # 2.09 ms less 533 MB at 4.81 TB/s


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_c_raw.csv.gz", "memory-bound-below-roofline")
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "memory-bound-below-roofline", max_roofline_pct=5)
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "memory-bound-below-roofline")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason


def test_no_roofline_without_flop_counts() -> None:
    _, o = outcome("kernels_b_details.csv.gz", "memory-bound-below-roofline")
    assert o.status == "not_applicable" and "roofline" in o.reason
