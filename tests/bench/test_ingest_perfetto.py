"""bench/ingest_perfetto.py end to end on a tiny generated trace: its layout, and both decoders run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import bench_module
from traceanalyzer.ingest.perfetto import decode as perfetto_decode
from traceanalyzer.ingest.perfetto import read_perfetto

bench = bench_module("ingest_perfetto")


def test_generated_trace_has_the_rocprof_layout(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    bench.build_rocprof_like(path, events=40)
    trace = read_perfetto(path)
    assert trace.gpu.height == 40 and trace.cpu.height == 40
    assert set(trace.gpu["kind"].cast(str).to_list()) == {"kernel"}
    assert trace.gpu["correlation"].sort().to_list() == trace.cpu["correlation"].sort().to_list()
    assert set(trace.gpu["stream"].to_list()) == {0, 1}


@pytest.mark.skipif(not perfetto_decode.WALKER_AVAILABLE, reason="the compiled walker is not built")
def test_bench_prints_both_decoders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.pftrace"
    bench.build_rocprof_like(path, events=40)
    assert bench.main([str(path), "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "40 GPU and 40 CPU rows" in out
    assert "walker " in out and "python " in out and "walker vs Python decoder" in out
