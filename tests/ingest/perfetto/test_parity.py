"""Conversion parity: each public Kineto trace, converted event by event to TrackEvent protobuf,
must give the same metrics through the Perfetto reader as the JSON does through the Kineto reader,
and the same raw tables through the compiled packet walker as through the Python decoder.

The converter (tests/support/perfetto_builder.py) works on the raw JSON, not on traceanalyzer's
frames, so this checks the Perfetto reader against an independent route.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.support.paths import public_kineto
from tests.support.perfetto_builder import kineto_to_perfetto
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.ingest import sniff
from traceanalyzer.ingest.kineto import read_kineto
from traceanalyzer.ingest.perfetto import read_perfetto
from traceanalyzer.ingest.perfetto.decode import WALKER_AVAILABLE, decode_stream
from traceanalyzer.ingest.perfetto.map import annotation_columns


def _per_kernel(result: object) -> pl.DataFrame:
    return result.kernels.select("name", "instances", "total_ns").sort("name")  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("path", public_kineto(), ids=lambda p: p.name)
def test_converted_trace_gives_the_same_metrics(tmp_path: Path, path: Path) -> None:
    out = tmp_path / (path.name + ".pftrace")
    slices = kineto_to_perfetto(path, out)
    assert slices > 0
    assert sniff(out) == "perfetto"

    # The compiled walker and the Python decoder (its reference) read it alike.
    with open(out, "rb") as fh:
        reference = decode_stream(fh, walker=False)
    with open(out, "rb") as fh:
        walked = decode_stream(fh, walker=True) if WALKER_AVAILABLE else reference
    for table in ("tracks", "events", "counters"):
        assert getattr(walked, table).equals(getattr(reference, table)), table
    assert annotation_columns(walked).equals(annotation_columns(reference))

    from_json = analyze_trace(read_kineto(path), rules=False)
    from_proto = analyze_trace(read_perfetto(out), rules=False)

    assert from_proto.metrics.kernel_count == from_json.metrics.kernel_count
    assert from_proto.metrics.busy_ns == from_json.metrics.busy_ns
    assert from_proto.metrics.span_ns == from_json.metrics.span_ns
    assert _per_kernel(from_proto).equals(_per_kernel(from_json))
