"""register-spill: fires on the bad kernel of its committed pair, quiet on the good twin and cuBLAS."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("spill_synthetic_raw.csv.gz", "register-spill")
    assert finding is not None
    assert kernels(finding) == ["ta_regs_spill_synthetic"]
    assert "30% of its L1 requests" in finding.message and "40 registers" in finding.message
    _, quiet = outcome("kernels_b_raw.csv.gz", "register-spill")
    assert quiet.status == "quiet"


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "register-spill")
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome("spill_synthetic_raw.csv.gz", "register-spill", min_spill_pct=40)
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "register-spill")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason
