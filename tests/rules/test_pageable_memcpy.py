"""pageable-memcpy on small synthetic traces: a pageable copy costs itself and the overlap its
wait lost."""

from __future__ import annotations

import pytest

from tests.support.synth import US, Synth, busy_loop, run


def _copy(s: Synth, src: str, api: str = "cudaMemcpyAsync") -> None:
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)" if src == "pageable" else "Memcpy HtoD (Pinned -> Device)",
             end + 10, 300, kind="memcpy", api=api, bytes=64 << 20, copy_kind="HtoD",
             src_kind=src, dst_kind="device")


def test_pageable_memcpy_fires_and_pinned_is_quiet():
    s = Synth()
    _copy(s, "pageable")
    f = run(s)[0]["pageable-memcpy"]
    assert f.impact_ns == 300 * US and "1 copy from" in f.message
    assert f.evidence[0]["exposed_us"] == pytest.approx(300)
    s = Synth()
    _copy(s, "pinned")
    assert "pageable-memcpy" not in run(s)[0]


def test_pageable_copy_is_charged_the_overlap_its_wait_lost():
    # x.to("cuda") from pageable memory, called 500 µs before the queue drains: the call returns
    # when the copy is done (at 1310 µs); the next kernel is launched 500 µs later. Without the
    # wait the CPU's 500 µs would have overlapped the GPU's last 494 µs of work (the queue's
    # last 498 µs less two 2 µs gaps between kernels).
    s = Synth()
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)", end + 10, 300, kind="memcpy", launch=end - 500,
             bytes=64 << 20, copy_kind="HtoD", src_kind="pageable", dst_kind="device",
             api="cudaMemcpyAsync")
    s.cpu[-1]["end_ns"] = int((end + 312) * US)  # the host call blocks until the copy is done
    s.kernel("gemm_bf16", end + 820, 100, launch=end + 810)
    f = run(s)[0]["pageable-memcpy"]
    assert f.evidence[0]["waited_us"] == pytest.approx(494)
    assert f.evidence[0]["gpu_idle_after_us"] == pytest.approx(508)
    assert f.impact_ns == (300 + 494) * US


def test_a_pageable_copy_onto_an_idle_gpu_loses_nothing():
    # The step begins by copying its batch: the GPU has nothing queued, so the call waits for no
    # GPU work, and the idle after it is the CPU's own time. Only the copy itself is charged.
    s = Synth()
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)", end + 1000, 300, kind="memcpy",
             launch=end + 990, bytes=64 << 20, copy_kind="HtoD", src_kind="pageable",
             dst_kind="device", api="cudaMemcpyAsync")
    s.cpu[-1]["end_ns"] = int((end + 1302) * US)
    s.kernel("gemm_bf16", end + 3000, 100, launch=end + 2990)
    f = run(s)[0]["pageable-memcpy"]
    assert f.evidence[0]["waited_us"] == 0 and f.evidence[0]["lost_us"] == 0
    assert f.impact_ns == 300 * US


def test_a_staged_pageable_copy_is_not_charged_the_idle_after_it():
    # torch.tensor(0.5).to("cuda"): an 8-byte pageable copy is staged and its call returns at
    # once; the copy runs 5 ms later behind the queued kernels. The GPU idles after it because
    # the host has nothing more to launch, not because of the copy.
    s = Synth()
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)", end + 10, 300, kind="memcpy", launch=end - 5000,
             bytes=8, copy_kind="HtoD", src_kind="pageable", dst_kind="device",
             api="cudaMemcpyAsync")
    s.kernel("gemm_bf16", end + 2820, 100, launch=end + 2810)
    f = run(s)[0]["pageable-memcpy"]  # the copy's own 300 µs are still counted
    assert f.evidence[0]["gpu_idle_after_us"] == 0 and f.evidence[0]["lost_us"] == 0
    assert f.impact_ns == 300 * US
