"""shared-memory-bank-conflicts: fires on the bad kernel of its committed pair, quiet on the good twin and cuBLAS."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("kernels_b_raw.csv.gz", "shared-memory-bank-conflicts")
    assert finding is not None
    assert kernels(finding) == ["ta_transpose_conflicts"]
    assert "94% of the shared wavefronts" in finding.message
    assert finding.impact_ns <= 468_000 - 107_000  # at most the time above its roofline bound


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "shared-memory-bank-conflicts")
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome(
        "kernels_b_raw.csv.gz", "shared-memory-bank-conflicts", min_conflict_pct=95
    )
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "shared-memory-bank-conflicts")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason
