"""register-spill: fires on the kernel whose launch bounds make it spill (recorded, report c),
quiet on its twin without the bounds and on the other reports."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("kernels_c_raw.csv.gz", "register-spill")
    assert finding is not None
    assert kernels(finding) == ["ta_regs_spill"]  # not ta_regs_heavy, the same code unbounded
    assert "32 registers" in finding.message and "100% of its L1 requests" in finding.message
    # the spilling kernel took 3.05 ms, its twin 607 µs: the estimate stays below the difference
    assert 500_000 < finding.impact_ns < 2_450_000
    _, quiet = outcome("kernels_b_raw.csv.gz", "register-spill")
    assert quiet.status == "quiet"


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "register-spill")
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome("kernels_c_raw.csv.gz", "register-spill", min_impact_pct=50)
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "register-spill")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason
