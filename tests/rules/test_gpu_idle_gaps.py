"""gpu-idle-gaps on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, busy_loop, run


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


def test_two_ranks_in_one_trace_judge_the_trace_rank_only():
    # A merged trace: rank 1 idles a lot, rank 0 (the trace's own rank) is busy.
    s = Synth()
    busy_loop(s, n=20)
    for i in range(10):
        s.kernel("gemm_bf16", i * 1000, 50, launch=i * 1000 - 5)
    for row in s.gpu[20:]:
        row["rank"] = 1
    findings, _ = run(s)  # run() checks every impact against rank 0's window
    assert "gpu-idle-gaps" not in findings
