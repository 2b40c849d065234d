"""low-gpu-utilization on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import Synth, busy_loop, run


def test_low_gpu_utilization_fires_when_mostly_idle():
    s = Synth()
    for i in range(40):
        s.kernel("gemm", i * 100, 10, launch=i * 100 - 2)  # 10% busy throughout
    f = run(s)[0]["low-gpu-utilization"]
    assert f.message.startswith("30 of 30 time chunks")
    assert "low-gpu-utilization" not in run(s, **{"low-gpu-utilization": {"max_util_pct": 5}})[0]


def test_low_gpu_utilization_quiet_with_one_slow_chunk():
    s = Synth()
    busy_loop(s, n=100)
    s.kernel("gemm", 20_300, 10, launch=20_290)  # one late kernel: only the last chunks are low
    assert "low-gpu-utilization" not in run(s)[0]
