"""The structural scanner that splits traceEvents into NDJSON must agree with a real JSON parser."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceanalyzer.ingest.kineto import jsonscan
from traceanalyzer.ingest.kineto.jsonscan import NotATrace, ScanResult, iter_ndjson_chunks


def split(data: bytes, chunk: int = 1 << 20) -> tuple[list[dict], ScanResult]:
    scan = ScanResult()
    lines = b"".join(iter_ndjson_chunks(io.BytesIO(data), scan, chunk_bytes=chunk))
    return [json.loads(line) for line in lines.splitlines() if line.strip()], scan


NASTY = [
    {"name": 'a "quoted" {brace} [bracket], comma', "ph": "X", "ts": 1, "args": {}},
    {"name": "back\\slash\\", "ph": "X", "ts": 2, "args": {"x": "\\\\\""}},
    {"name": "}]},{[", "ph": "X", "ts": 3, "args": {"nested": {"a": [1, {"b": "]"}]}}},
    {"name": "line\nbreak\ttab \u2028 é 漢字 </script>", "ph": "X", "ts": 4},
    {"name": "", "ph": "i", "ts": 5, "args": {"empty": {}, "list": []}},
]


@pytest.mark.parametrize("indent", [None, 0, 2])
@pytest.mark.parametrize("chunk", [7, 64, 1 << 20])
def test_nasty_strings_and_any_chunking(indent, chunk):
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": NASTY,
           "traceName": "x]}"}
    events, scan = split(json.dumps(doc, indent=indent).encode(), chunk)
    assert events == NASTY
    assert not scan.truncated
    meta = json.loads(scan.metadata_json)
    assert meta["traceName"] == "x]}" and meta["traceEvents"] == []


def test_bare_array_form():
    events, scan = split(json.dumps(NASTY).encode(), 16)
    assert events == NASTY
    assert json.loads(scan.metadata_json) == []
    for lead in (b"\xef\xbb\xbf", b" \n\t", b"\xef\xbb\xbf\r\n"):  # a BOM, whitespace
        events, _ = split(lead + json.dumps(NASTY).encode(), 16)
        assert events == NASTY


def test_trace_events_key_after_other_arrays_and_in_strings():
    doc = {"note": '"traceEvents": [', "deviceProperties": [[1], {"traceEvents": [9]}],
           "traceEvents": NASTY[:2]}
    events, _ = split(json.dumps(doc).encode(), 5)
    assert events == NASTY[:2]


@pytest.mark.parametrize("cut", [10, 100, 200, 300, 400])
def test_truncation_keeps_complete_events(cut):
    data = json.dumps({"traceEvents": NASTY}, indent=1).encode()
    events, scan = split(data[: len(data) - cut], 32)
    assert scan.truncated
    assert events == NASTY[: len(events)]
    assert len(events) < len(NASTY)


def test_not_a_trace():
    for data in (b'{"foo": 1}', b'{"a": "traceEvents"}', b"   "):
        with pytest.raises(NotATrace):
            split(data)
    events, scan = split(b"[")  # an array cut right after it opened: empty and truncated
    assert events == [] and scan.truncated


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**62), 2**62) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
events_strategy = st.lists(
    st.fixed_dictionaries({"ph": st.sampled_from(["X", "i", "M"]), "name": st.text(max_size=30),
                           "ts": st.integers(0, 2**50)}, optional={"args": json_values}),
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(events=events_strategy, indent=st.sampled_from([None, 1, 4]), chunk=st.integers(1, 300))
def test_property_scanner_equals_json_parser(events, indent, chunk):
    data = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=indent,
                      ensure_ascii=False).encode()
    parsed, scan = split(data, chunk)
    assert parsed == events
    assert not scan.truncated


@pytest.mark.parametrize("indent", [None, 1])
def test_every_chunk_boundary(indent):
    # Chunks that end exactly on an event's closing brace, or on the array's "]" right after it,
    # take the copy path of the NDJSON rewrite; all others rewrite the read buffer in place.
    data = json.dumps({"traceEvents": NASTY, "after": [1]}, indent=indent).encode()
    for chunk in range(1, len(data) + 2):
        events, scan = split(data, chunk)
        assert events == NASTY, chunk
        assert json.loads(scan.metadata_json)["after"] == [1]


def test_crlf_line_endings():
    data = json.dumps({"traceEvents": NASTY}, indent=2).replace("\n", "\r\n").encode()
    events, _ = split(data, 40)
    assert events == NASTY


def test_gzip_stream_readinto_members_and_truncation():
    import gzip

    from traceanalyzer.ingest.kineto.gzipstream import GzipStream

    payload = json.dumps({"traceEvents": NASTY * 50}).encode()
    half = len(payload) // 2
    members = gzip.compress(payload[:half]) + gzip.compress(payload[half:])
    stream = GzipStream(io.BytesIO(members), block=64)
    assert stream.read(10) + stream.read() == payload and not stream.truncated
    stream = GzipStream(io.BytesIO(members), block=100)
    buf = bytearray(333)
    got = bytearray()
    while n := stream.readinto(buf):
        got += buf[:n]
    assert bytes(got) == payload
    cut = GzipStream(io.BytesIO(members[: len(members) // 3]), block=50)
    head = cut.read()
    assert cut.truncated and payload.startswith(head) and head


@settings(max_examples=300, deadline=None)
@given(data=st.text(alphabet='"\\{}[]a', max_size=200), block=st.integers(1, 17),
       max_depth=st.sampled_from([None, 0, 1, 2]))
def test_structure_block_by_block_equals_whole(data, block, max_depth):
    # Quotes, escapes and depth carry across block boundaries (a backslash run cut by one).
    buf = np.frombuffer(data.encode(), dtype=np.uint8)
    whole = jsonscan._structure(buf, 1, data.encode(), max_depth=max_depth)
    saved = jsonscan.SCAN_BLOCK_BYTES
    jsonscan.SCAN_BLOCK_BYTES = block
    try:
        blocks = jsonscan._structure(buf, 1, data.encode(), max_depth=max_depth)
    finally:
        jsonscan.SCAN_BLOCK_BYTES = saved
    for a, b in zip(whole, blocks, strict=True):
        assert a.tolist() == b.tolist()


@settings(max_examples=100, deadline=None)
@given(events=events_strategy, indent=st.sampled_from([None, 1]), chunk=st.integers(1, 300),
       block=st.integers(1, 64))
def test_property_scanner_in_small_blocks(events, indent, chunk, block):
    data = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=indent,
                      ensure_ascii=False).encode()
    saved = jsonscan.SCAN_BLOCK_BYTES
    jsonscan.SCAN_BLOCK_BYTES = block
    try:
        parsed, scan = split(data, chunk)
    finally:
        jsonscan.SCAN_BLOCK_BYTES = saved
    assert parsed == events
    assert not scan.truncated


def test_event_longer_than_many_chunks_is_read_in_growing_reads():
    # One 2 MB name of escaped quotes, read in 4 KB chunks: the carry is scanned again with
    # each read, so reads grow with it (a few scans, not 500).
    name = '"' * (1 << 20)
    events = [{"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": name, "ts": 2},
              {"ph": "X", "name": "b", "ts": 3}]
    data = json.dumps({"traceEvents": events}).encode()
    scans = []
    real = jsonscan._structure

    def counting(buf, *args, **kwargs):
        scans.append(buf.size)
        return real(buf, *args, **kwargs)

    jsonscan._structure = counting
    try:
        parsed, _ = split(data, 4096)
    finally:
        jsonscan._structure = real
    assert parsed == events
    assert sum(scans) < 8 * len(data)
