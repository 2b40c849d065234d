"""memory-near-capacity on small synthetic traces (allocator and driver memory rows on a device
of known or unknown memory), on the synthetic Kineto example and on the recorded programs."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.support import memory_traces
from tests.support.paths import SAMPLES
from tests.support.synth import US, Synth, busy_loop, run
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import read_any
from traceanalyzer.rules import RuleConfig, evaluate

SLUG = "memory-near-capacity"
GB = 10**9
CAPACITY = 100 * GB


def _loop(
    reserved_pct: float, *, source: str = "allocator", capacity: int | None = CAPACITY
) -> Synth:
    """Three 2 ms steps; in each, aten::linear allocates 30 GB on top of 50 GB of weights (80 GB
    allocated) while the allocator holds ``reserved_pct`` of the device, then frees them."""
    s = Synth(memory_bytes=capacity)
    reserved = int(reserved_pct * CAPACITY / 100)
    driver = source == "driver"
    s.memory(
        1,
        50 * GB,
        None if driver else 50 * GB,
        50 * GB,
        address=1,
        operator="aten::to",
        source=source,
    )
    for n, t0 in enumerate((100, 2100, 4100)):
        s.step(n, t0, 2000)
        s.op("aten::linear", t0 + 10, 100)
        s.memory(
            t0 + 20,
            30 * GB,
            None if driver else 80 * GB,
            reserved,
            address=2 + n,
            operator="aten::linear",
            source=source,
        )
        for i in range(9):
            s.kernel("gemm", t0 + 30 + i * 200, 200, launch=t0 + 15 + i)
        s.memory(
            t0 + 1900, -30 * GB, None if driver else 50 * GB, reserved, address=2 + n, source=source
        )
    return s


def test_fires_at_95_pct_with_the_fragmentation_and_holders():
    findings, outcomes = run(_loop(95))
    f = findings[SLUG]
    assert f.severity == "info" and f.impact_ns == 0  # a risk, not lost time
    assert outcomes[SLUG].status == "fired"
    # 95 GB reserved, 80 GB allocated at the peak: 15 GB (15.8% of the reserved) unallocated
    assert "95.00 GB, 95.0% of its 100.00 GB" in f.message
    assert "allocated at most: 80.00 GB (80.0%)" in f.message
    assert "(fragmentation): 15.00 GB, 15.8% of the reserved" in f.message
    assert (
        "in step 0 (from the allocator)" in f.message
        and "most held by aten::to, aten::linear." in f.message
    )
    assert f.evidence[0]["bytes"] == 95 * GB
    held = {e["what"]: e["bytes"] for e in f.evidence[1:]}
    assert held["held at the allocated peak: aten::linear"] == 30 * GB
    assert sum(held.values()) == 80 * GB


def test_quiet_at_50_pct():
    findings, outcomes = run(_loop(50))
    assert SLUG not in findings
    assert outcomes[SLUG].status == "quiet"


@pytest.mark.parametrize(("threshold", "fires"), [(80.0, True), (97.0, False)])
def test_min_reserved_pct_changes_the_verdict(threshold: float, fires: bool):
    findings, _ = run(_loop(95), **{SLUG: {"min_reserved_pct": threshold}})
    assert (SLUG in findings) is fires


def test_not_applicable_when_the_capacity_is_unknown():
    _, outcomes = run(_loop(95, capacity=None))
    assert outcomes[SLUG].status == "not_applicable"
    assert "memory size" in outcomes[SLUG].reason


def test_not_applicable_without_memory_events():
    s = Synth(memory_bytes=CAPACITY)
    busy_loop(s)
    _, outcomes = run(s)
    assert outcomes[SLUG].status == "not_applicable"
    assert "no device memory events" in outcomes[SLUG].reason


def test_driver_rows_fire_without_an_allocated_figure():
    # Nsight Systems: the driver's running total is the peak; the allocator's use is not seen
    s = _loop(95, source="driver")
    findings, _ = run(s)
    f = findings[SLUG]
    assert "95.00 GB, 95.0% of its 100.00 GB" in f.message
    assert "(from the driver); allocated at most: not recorded" in f.message
    assert f.impact_ns == 0 and f.evidence[0]["start_ns"] == 120 * US


def test_the_example_is_what_the_code_writes():
    path = SAMPLES / "synthetic" / memory_traces.NAME
    with gzip.open(path) as fh:
        assert json.load(fh) == memory_traces.near_capacity().document()


PROGRAMS = sorted(
    p
    for sub in ("torch", "nsys")
    for p in (SAMPLES / "programs" / sub).glob("*")
    if p.name.endswith((".json.gz", ".sqlite"))
)


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_quiet_on_the_recorded_programs(path):
    # the H200 programs use a few GB of 141 GiB
    findings, outcomes = evaluate(Views(choose_window(read_any(path))), RuleConfig())
    assert SLUG not in {f.slug for f in findings}
    (outcome,) = [o for o in outcomes if o.slug == SLUG]
    assert outcome.status in ("quiet", "not_applicable")
