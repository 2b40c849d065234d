"""uncoalesced-memory-access: fires on the bad kernel of its committed pair, quiet on the good twin and cuBLAS."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("kernels_a_raw.csv.gz", "uncoalesced-memory-access")
    assert finding is not None
    assert kernels(finding) == ["ta_copy_strided"]
    # 2.09 ms x (1 - 12.5%): the coalesced twin took 0.21 ms, 1.88 ms less
    assert 1_800_000 < finding.impact_ns < 1_850_000
    assert "12% of the bytes (32 sectors a load request)" in finding.message


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_b_raw.csv.gz", "uncoalesced-memory-access")
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "uncoalesced-memory-access", max_efficiency_pct=10)
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "uncoalesced-memory-access")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason


def test_not_applicable_on_a_details_page() -> None:
    # the details page shows no sector counts: the rule says so instead of staying quiet
    _, o = outcome("kernels_a_details.csv.gz", "uncoalesced-memory-access")
    assert o.status == "not_applicable" and "details page" in o.reason


def test_pytorchs_own_strided_add() -> None:
    # the workloads' bf16 add on a transposed view (466 us) against the contiguous one (91.6 us)
    finding, _ = outcome("strided_elementwise_bad_raw.csv.gz", "uncoalesced-memory-access")
    assert finding is not None and "17% of the bytes" in finding.message
    assert 370_000 < finding.impact_ns < 390_000  # measured: 374 us
    quiet, _ = outcome("strided_elementwise_good_raw.csv.gz", "uncoalesced-memory-access")
    assert quiet is None
