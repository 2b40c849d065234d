"""collective-wait on small synthetic traces: the time collectives wait for other ranks with no
compute beside them, told apart from their transfers (analysis/comm.py)."""

from __future__ import annotations

import re

import pytest

from tests.support.synth import Synth, busy_loop, run, steps_with_exposed_allreduce


def test_the_wait_is_collective_waits_finding():
    s = Synth()
    steps_with_exposed_allreduce(s, [3000, 300, 300])
    findings, _ = run(s)
    f = findings["collective-wait"]
    assert f.impact_ns == pytest.approx(2700 * 1000)
    assert "in 1 collective of 3; the longest wait 2.7 ms (allreduce)" in f.message
    assert "Their transfers took 300.0 µs" in f.message
    assert f.evidence[0]["exposed_wait_us"] == pytest.approx(2700)


def test_a_wait_beside_compute_is_not_lost():
    # The same waits, but another stream computes through them: the GPU lost nothing.
    s = Synth()
    steps_with_exposed_allreduce(s, [3000, 300, 300])
    busy_loop(s, n=3, dur=1000, start=2000, stream=9, name="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn")
    assert "collective-wait" not in run(s)[0]


def test_collective_wait_is_quiet_without_anything_to_compare_with():
    s = Synth()
    steps_with_exposed_allreduce(s, [3000, 3000, 3000])
    assert "collective-wait" not in run(s)[0]


def test_a_cpu_bound_rank_is_told_the_wait_may_come_from_the_hosts():
    # The same wait, once on a GPU-bound rank and once on a rank whose GPU also waited for its
    # host a third of the window (kernels launched only after the GPU ran dry): a rank paced by
    # its CPU drifts with its host's timing, and the message says so.
    s = Synth()
    steps_with_exposed_allreduce(s, [3000, 300, 300])
    f = run(s)[0]["collective-wait"]
    assert f.message.endswith("Their transfers took 300.0 µs.")  # nothing about the host

    end = max(row["end_ns"] for row in s.gpu) / 1000
    for i in range(10):  # 500 µs gaps, each kernel launched 490 µs into its gap
        start = end + 500 + i * 600
        s.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", start, 100, launch=start - 10)
    f = run(s)[0]["collective-wait"]
    assert f.impact_ns == pytest.approx(2700 * 1000)  # the same wait
    host_wait = re.search(r"waited for its host (\d+)% of its active span: its step is CPU-bound",
                          f.message)
    assert host_wait and int(host_wait[1]) > 30


def test_the_cpu_bound_threshold_is_a_parameter():
    s = Synth()
    steps_with_exposed_allreduce(s, [3000, 300, 300])
    f = run(s, **{"collective-wait": {"cpu_bound_host_wait_pct": 0}})[0]["collective-wait"]
    assert "its step is CPU-bound" in f.message
