"""bench/ingest_perfetto.py end to end on a tiny generated trace: both decoders run and agree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from conftest import REPO

from traceanalyzer.ingest import perfetto_decode
from traceanalyzer.ingest.perfetto import read_perfetto


def _bench_module(name: str):  # noqa: ANN202 - a module loaded from a path
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _bench_module("ingest_perfetto")


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
