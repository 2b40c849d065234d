"""compute-bound-below-peak: fires on the bad kernel of its committed pair, quiet on the good twin and cuBLAS."""

from __future__ import annotations

from tests.support.ncu import kernels, outcome


def test_fires_on_the_bad_kernel_only() -> None:
    finding, _ = outcome("kernels_b_raw.csv.gz", "compute-bound-below-peak")
    assert finding is not None
    assert kernels(finding) == ["ta_tail_effect"]
    # the full-wave twin (84% of FP32 peak) and cuBLAS (97% of the tensor pipe) are near
    # their roofline; the 78-register kernel of report a (16%) is judged too
    assert "56% of its roofline" in finding.message
    finding_a, _ = outcome("kernels_a_raw.csv.gz", "compute-bound-below-peak")
    assert kernels(finding_a) == ["ta_regs_heavy"]


def test_quiet_on_the_other_report() -> None:
    finding, o = outcome("kernels_a_raw.csv.gz", "compute-bound-below-peak", max_roofline_pct=10)
    assert finding is None and o.status == "quiet"


def test_a_parameter_changes_the_verdict() -> None:
    finding, o = outcome("kernels_b_raw.csv.gz", "compute-bound-below-peak", max_roofline_pct=50)
    assert finding is None and o.status == "quiet"


def test_not_applicable_without_kernel_metrics() -> None:
    _, o = outcome("kernels_trace.json.gz", "compute-bound-below-peak")
    assert o.status == "not_applicable" and "Nsight Compute" in o.reason
