"""sync-memcpy on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, busy_loop, run


def test_sync_memcpy_fires_on_blocking_copies_only():
    s = Synth()
    busy_loop(s, n=5)
    s.api("cudaMemcpy", 1100, 400)
    f = run(s)[0]["sync-memcpy"]
    assert f.impact_ns == 400 * US and "cudaMemcpy" in f.message
    s = Synth()
    busy_loop(s, n=5)
    s.api("cudaMemcpyAsync", 1100, 400)
    s.api("cudaMemsetAsync", 1500, 40)
    assert "sync-memcpy" not in run(s)[0]
