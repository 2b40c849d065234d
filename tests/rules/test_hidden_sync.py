"""hidden-sync on small synthetic traces: a sync costs the overlap of CPU and GPU work it
prevents, not the idle that follows it."""

from __future__ import annotations

import pytest

from tests.support.synth import US, Synth, busy_loop, run


def _sync_step(s: Synth, t0: float, with_sync: bool) -> None:
    s.step(int(t0 // 10_000), t0, 10_000)
    for i in range(10):  # queued well ahead: the GPU is busy 0..2000
        s.kernel("gemm", t0 + 20 + i * 200, 200, launch=t0 + 1 + i * 5)
    if with_sync:
        # loss.item(): the CPU waits for the queue to drain, then Python takes 3 ms
        s.op("aten::item", t0 + 60, 2000, ext=900)
        s.op("aten::_local_scalar_dense", t0 + 61, 1998, ext=901)
        s.api("cudaStreamSynchronize", t0 + 62, 1960, op="aten::_local_scalar_dense")
        s.kernel("gemm", t0 + 5030, 200, launch=t0 + 5020)
    else:
        s.kernel("gemm", t0 + 2020, 200, launch=t0 + 60)


def test_hidden_sync_fires_and_names_the_operator():
    s = Synth()
    _sync_step(s, 0, True)
    _sync_step(s, 10_000, True)
    findings, _ = run(s)
    f = findings["hidden-sync"]
    assert f.evidence[0]["op"] == "aten::item"
    assert f.evidence[0]["api"] == "cudaStreamSynchronize"
    # the CPU waits from aten::item (60) for the queue to drain (2020): 1960 µs of GPU work;
    # the GPU idles from the call's return (2022) to the next kernel (5030)
    assert f.evidence[0]["waited_us"] == pytest.approx(1960)
    assert f.evidence[0]["gpu_idle_after_us"] == pytest.approx(3008)
    # without the sync the 3 ms of Python would have run while the GPU drained its 1960 µs
    assert f.evidence[0]["lost_us"] == pytest.approx(1960)
    assert f.impact_ns == 2 * 1960 * US
    assert "2 host-device synchronizations" in f.message and "aten::item" in f.message


def test_hidden_sync_costs_only_the_relaunch_when_the_cpu_launches_at_once():
    # A GPU-bound loop reading the loss: the CPU waits 1960 µs, then launches again 30 µs later.
    s = Synth()
    for t0 in (0, 10_000):
        s.step(int(t0 // 10_000), t0, 10_000)
        for i in range(10):
            s.kernel("gemm", t0 + 20 + i * 200, 200, launch=t0 + 1 + i * 5)
        s.op("aten::item", t0 + 60, 1965, ext=900)
        s.api("cudaStreamSynchronize", t0 + 62, 1960, op="aten::item")
        s.kernel("gemm", t0 + 2052, 200, launch=t0 + 2040)
    findings, outcomes = run(s)
    assert "hidden-sync" not in findings  # 2 x 30 µs of 20 ms
    f = run(s, **{"hidden-sync": {"min_impact_pct": 0}})[0]["hidden-sync"]
    assert f.impact_ns == 2 * 30 * US and f.evidence[0]["waited_us"] == pytest.approx(1960)


def test_hidden_sync_costs_only_the_queued_work_before_a_long_cpu_stretch():
    # The GPU had 100 µs left when the CPU synced; then 20 ms of CPU work (the next batch):
    # overlapping would have saved 100 µs, not the 20 ms of idle, which is the CPU's own doing.
    s = Synth()
    s.step(0, 0, 25_000)
    busy_loop(s, n=5)  # GPU busy 0..1008
    s.op("aten::item", 908, 102, ext=900)
    s.api("cudaStreamSynchronize", 909, 100, op="aten::item")
    s.kernel("gemm", 21_000, 200, launch=20_990)
    f = run(s, **{"hidden-sync": {"min_impact_pct": 0}})[0]["hidden-sync"]
    assert f.evidence[0]["waited_us"] == pytest.approx(100)
    assert f.evidence[0]["gpu_idle_after_us"] == pytest.approx(21_000 - 1009)
    assert f.impact_ns == 100 * US


def test_hidden_sync_counts_a_read_into_pageable_memory_as_a_sync():
    # Nsight Systems has no operators: .cpu() is a cudaMemcpyAsync into pageable memory, which
    # returns only when the copy is done. The CPU waited inside it for the queue to drain.
    s = Synth()
    s.step(0, 0, 10_000)
    busy_loop(s, n=10)  # GPU busy 0..2018, but for 2 µs between kernels
    s.kernel("Memcpy DtoH (Device -> Pageable)", 2020, 2, kind="memcpy", launch=100,
             api="cudaMemcpyAsync", bytes=4, copy_kind="DtoH", src_kind="device",
             dst_kind="pageable")
    s.cpu[-1]["end_ns"] = 2023 * US
    s.kernel("gemm", 5000, 200, launch=4990)
    f = run(s)[0]["hidden-sync"]
    assert f.evidence[0]["api"] == "cudaMemcpyAsync"
    assert f.evidence[0]["waited_us"] == pytest.approx(2018 - 100 - 9 * 2)
    assert f.impact_ns == 1900 * US


def test_hidden_sync_waits_only_for_gpu_work():
    # The operator began long before the GPU had anything to do (a first call that also
    # initialized CUDA): only the GPU's busy time inside the wait counts as waiting for it.
    s = Synth()
    s.step(0, 0, 20_000)
    s.op("aten::to", -50_000, 50_620, ext=900)
    s.kernel("gemm", 400, 200, launch=390)
    s.api("cudaStreamSynchronize", 560, 60, op="aten::to")
    s.kernel("gemm", 5000, 200, launch=4990)
    f = run(s, **{"hidden-sync": {"min_impact_pct": 0}})[0]["hidden-sync"]
    assert f.evidence[0]["waited_us"] == pytest.approx(200)


def test_hidden_sync_quiet_without_syncs():
    s = Synth()
    _sync_step(s, 0, False)
    _sync_step(s, 10_000, False)
    assert "hidden-sync" not in run(s)[0]
