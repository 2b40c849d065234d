"""The scan's early drop of events whose phase never becomes a canonical row (flows, metadata)."""

from __future__ import annotations

import io
import json

from traceanalyzer.ingest.kineto import read_kineto
from traceanalyzer.ingest.kineto.jsonscan import ScanResult, iter_ndjson_chunks

TRACE = (
    b'{"traceEvents":[ {\n "ph": "f", "id": 1}, {"ph":"s"}, {"ph": "X", "ts": 1},'
    b' {  "ph": "M", "name":"x"},{"ph": "\\u0058", "ts":2}, {"ph": "i"},{"name":"n","ph":"f"},'
    b' {"ph": "Xf"}, {"ph": "\\"", "x": 1}\r\n]}'
)


def _events(keep: bytes | None) -> list[dict]:
    chunks = iter_ndjson_chunks(io.BytesIO(TRACE), ScanResult(), keep_phases=keep)
    return [json.loads(line) for chunk in chunks for line in chunk.splitlines() if line.strip()]


def test_only_plain_other_phases_are_dropped():
    every = _events(None)
    assert len(every) == 9
    kept = _events(b"XiI")
    # The plain '"ph": "f"' / '"ph": "M"' first keys go; anything laid out otherwise, escaped or
    # longer than one letter is left for the decoder.
    assert kept == [e for e in every if e.get("id") != 1 and e.get("name") != "x"]


def test_dropping_early_changes_no_frame(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"External id": 7}},
        {"ph": "s", "id": 3, "pid": 1, "tid": 1, "ts": 11, "cat": "ac2g", "name": "flow"},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 11, "dur": 2, "args": {"External id": 7, "correlation": 3}},
        {"ph": "f", "id": 3, "pid": 0, "tid": 7, "ts": 20, "cat": "ac2g", "name": "flow", "bp": "e"},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 4,
         "args": {"correlation": 3, "device": 0, "stream": 7, "grid": [1, 2, 3]}},
    ]
    with_flows = tmp_path / "a.json"
    with_flows.write_text(json.dumps({"traceEvents": events}, indent=1))
    without = tmp_path / "b.json"
    without.write_text(json.dumps({"traceEvents": [e for e in events if e["ph"] == "X"]}))
    a, b = read_kineto(with_flows), read_kineto(without)
    for name, frame in a.frames().items():
        assert frame.equals(b.frames()[name]), name
    assert a.cpu.filter(kind="runtime")["parent_op"].to_list() == ["aten::mm"]
    assert a.gpu["grid_y"].to_list() == [2]
