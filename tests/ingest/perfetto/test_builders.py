"""The Perfetto test-trace builders of tests/support/perfetto_builder.py."""

from __future__ import annotations

from pathlib import Path

from tests.support.perfetto_builder import RocprofLikeBuilder, kineto_ns


def test_rocprof_builder_writes_a_packet_stream(tmp_path: Path) -> None:
    b = RocprofLikeBuilder()
    b.hip_api(11, 100, 200, "hipLaunchKernel", 1)
    b.kernel(2, 0, 300, 400, "k", 1)
    data = b.serialize()
    assert data[:1] == b"\x0a"
    assert len(b.builder.trace.packet) == 1 + 2 + 4  # process, 2 tracks, 2 slices of 2 packets


def test_kineto_ns_rounds_the_fraction_alone() -> None:
    assert kineto_ns(1695835572943613.5) == 1695835572943613500
    assert kineto_ns(4203669604595.407) == 4203669604595407
