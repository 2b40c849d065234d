"""gpu-idle-gaps on small synthetic traces."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from tests.support.synth import US, Synth, busy_loop, run
from traceanalyzer import analyze
from traceanalyzer.analysis.views import Views
from traceanalyzer.rules import RuleConfig, evaluate


def test_gpu_idle_gaps_fires_on_host_wait_gaps():
    s = Synth()
    s.step(0, 0, 3000)
    for i in range(10):
        # each kernel is launched only after the previous one ended: host wait
        s.kernel("gemm", i * 300 + 10, 100, launch=i * 300 + 2)
    findings, outcomes = run(s)
    f = findings["gpu-idle-gaps"]
    assert "host wait 100%" in f.message and "CPU-bound" in f.message
    assert f.impact_ns == 9 * 200 * US
    assert f.evidence[0]["cause"] == "host_wait" and f.evidence[0]["end_ns"] > f.evidence[0]["start_ns"]
    assert f.impact_per_step_ns == f.impact_ns  # one step
    assert outcomes["gpu-idle-gaps"].status == "fired"


def test_gpu_idle_gaps_quiet_when_busy_and_tunable():
    s = Synth()
    busy_loop(s)
    findings, _ = run(s)
    assert "gpu-idle-gaps" not in findings
    s = Synth()
    for i in range(10):
        s.kernel("gemm", i * 300 + 10, 100, launch=i * 300 + 2)
    assert "gpu-idle-gaps" in run(s)[0]
    # a threshold above the gaps silences it
    assert "gpu-idle-gaps" not in run(s, **{"gpu-idle-gaps": {"min_gap_us": 500}})[0]


def test_two_ranks_in_one_trace_are_judged_each_on_its_own():
    # A merged trace: rank 1 idles a lot, rank 0 (the trace's own rank) is busy.
    s = Synth()
    busy_loop(s, n=20)
    for i in range(10):
        s.kernel("gemm_bf16", i * 1000, 50, launch=i * 1000 - 5)
    for row in s.gpu[20:]:
        row["rank"] = 1
    views = Views(s.trace())
    findings, _ = evaluate(views, RuleConfig())
    idle = [f for f in findings if f.slug == "gpu-idle-gaps"]
    assert [f.rank for f in idle] == [1]  # rank 1's idle, not rank 0's
    span = views.metrics_by_rank[1].span_ns
    assert idle[0].impact_ns <= span and idle[0].impact_pct > 50
    run(s)  # and every finding's impact within its own rank's window


ALEXNET = PUBLIC / "kineto" / "hta_alexnet_sync.json.gz"  # a 10 s wait in a 12.9 s GPU span
RESIDENT = SAMPLES / "programs" / "torch" / "copy_bound_resident_torch.json.gz"


@pytest.mark.skipif(not ALEXNET.exists(), reason="public traces absent")
def test_idle_of_seconds_reads_in_seconds_on_a_real_trace():
    # HTA's AlexNet trace idles 12.9 s: "12853.3 ms" is a number no reader parses at a glance.
    findings = {f.slug: f for f in analyze(ALEXNET, use_cache=False).findings}
    assert "GPU idle 12.9 s (" in findings["gpu-idle-gaps"].message
    assert "the GPU was idle 12.9 s in them" in findings["low-gpu-utilization"].message
    for f in findings.values():
        assert not re.search(r"\d{4,}\.\d ms", f.message), f.message


def test_worst_step_idle_in_the_unit_of_the_total():
    # The resident-copy program idles 139 µs, all in step 2: the step's share read "0.1 ms".
    f = {f.slug: f for f in analyze(RESIDENT, use_cache=False).findings}["gpu-idle-gaps"]
    assert "GPU idle 139.0 µs (" in f.message
    assert "Most idle in step 2 (139.0 µs)" in f.message
