"""Conversion parity: each public Kineto trace, converted event by event to TrackEvent protobuf,
must give the same metrics through the Perfetto reader as the JSON does through the Kineto reader.

The converter (tests/test_perfetto_support.py) works on the raw JSON, not on traceanalyzer's
frames, so this checks the Perfetto reader against an independent route.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import public_kineto
from test_perfetto_support import kineto_to_perfetto

from traceanalyzer.analysis import analyze_trace
from traceanalyzer.ingest import sniff
from traceanalyzer.ingest.kineto import read_kineto
from traceanalyzer.ingest.perfetto import read_perfetto


def _per_kernel(result: object) -> pl.DataFrame:
    return result.kernels.select("name", "instances", "total_ns").sort("name")  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("path", public_kineto(), ids=lambda p: p.name)
def test_converted_trace_gives_the_same_metrics(tmp_path: Path, path: Path) -> None:
    out = tmp_path / (path.name + ".pftrace")
    slices = kineto_to_perfetto(path, out)
    assert slices > 0
    assert sniff(out) == "perfetto"

    from_json = analyze_trace(read_kineto(path), rules=False)
    from_proto = analyze_trace(read_perfetto(out), rules=False)

    assert from_proto.metrics.kernel_count == from_json.metrics.kernel_count
    assert from_proto.metrics.busy_ns == from_json.metrics.busy_ns
    assert from_proto.metrics.span_ns == from_json.metrics.span_ns
    assert _per_kernel(from_proto).equals(_per_kernel(from_json))
