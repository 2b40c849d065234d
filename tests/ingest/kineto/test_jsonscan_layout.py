"""Splitting events by their line layout must give exactly what the structural scan gives.

Once the structural scan has seen events start on lines of their own, later chunks are split at
the newlines alone (``by_layout``). A piece that is not one JSON object is caught by the decoder,
and the Kineto reader then reads the file again with the structural scan.
"""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceanalyzer.ingest.kineto import jsonscan, read_kineto
from traceanalyzer.ingest.kineto.jsonscan import ScanResult, iter_ndjson_chunks

NASTY_NAMES = ['a "q" {b} [c], d', "}]},{[", "back\\slash\\", "line\nbreak\t", "\n  {", "é 漢 </s>"]


def events(n: int) -> list[dict]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": NASTY_NAMES[i % len(NASTY_NAMES)] + str(i),
         "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5,
         "args": {"External id": i, "Input Dims": [[i, 2], []], "nested": {"x": [{"y": "]"}]}}}
        for i in range(n)
    ]


def split(data: bytes, chunk: int) -> tuple[list[dict], ScanResult]:
    scan = ScanResult()
    out = b"".join(iter_ndjson_chunks(io.BytesIO(data), scan, chunk_bytes=chunk, by_layout=True))
    return [json.loads(line) for line in out.splitlines() if line.strip()], scan


@pytest.mark.parametrize("indent", [0, 1, 2, 4, "\t"])
def test_every_chunk_size_agrees_with_json(indent):
    evs = events(40)
    data = json.dumps({"schemaVersion": 1, "traceEvents": evs, "after": {"k": [1]}},
                      indent=indent).encode()
    used = 0
    for chunk in range(300, len(data) + 2, 97):
        parsed, scan = split(data, chunk)
        assert parsed == evs, chunk
        assert json.loads(scan.metadata_json)["after"] == {"k": [1]}
        used += scan.split_by_layout
    # With indent 0, objects inside lists also start lines at column 0: the layout is ambiguous
    # and never learned; otherwise it is used.
    assert (used > 0) == (indent != 0)


def test_kineto_layout_is_learned_and_used():
    # Kineto's own layout: two-space events, "},\n  {" between them.
    evs = events(300)
    data = json.dumps({"traceEvents": evs}, indent=2).encode()
    parsed, scan = split(data, 4096)
    assert parsed == evs
    assert scan.split_by_layout >= len(data) // 4096 - 3


def test_one_line_traces_never_use_the_layout():
    data = json.dumps({"traceEvents": events(100)}).encode()
    parsed, scan = split(data, 500)
    assert parsed == events(100) and scan.split_by_layout == 0


#: Small traces of any layout and chunk size, and how many bytes to cut off their end.
TRACES = dict(
    n=st.integers(0, 30),
    indent=st.sampled_from([None, 0, 1, 2, 3]),
    chunk=st.integers(40, 1500),
    names=st.lists(st.text(max_size=12), min_size=1, max_size=5),
    cut=st.integers(0, 60),
)


@settings(max_examples=120, deadline=None)
@given(**TRACES)
def test_property_layout_split_equals_json(n, indent, chunk, names, cut):
    evs = [{"ph": "X", "name": names[i % len(names)], "ts": i, "args": {"a": [i, {"b": names[0]}]}}
           for i in range(n)]
    data = json.dumps({"traceEvents": evs, "z": names}, indent=indent, ensure_ascii=False).encode()
    parsed, scan = split(data, chunk)
    assert parsed == evs
    # Cut short: every event before the damage is kept, none is invented.
    if cut and b'"traceEvents": [' in data[:-cut]:
        parsed, scan = split(data[:-cut], chunk)
        assert parsed == evs[: len(parsed)]


def test_trailing_objects_at_the_event_indent_end_the_array(tmp_path):
    evs = events(50)
    body = ",\n".join("  " + json.dumps(e) for e in evs)
    data = ('{"traceEvents": [\n' + body + '\n  ],\n  "more": [\n  {"a": 1},\n  {"b": 2}\n  ]\n}')
    parsed, scan = split(data.encode(), 700)
    assert parsed == evs
    assert json.loads(scan.metadata_json)["more"] == [{"a": 1}, {"b": 2}]


def test_piece_with_two_events_is_read_again_with_the_scan(tmp_path, monkeypatch):
    # Two events on one line look like one piece to the layout split; the decoder rejects the
    # line and the reader starts over with the structural scan, losing nothing.
    evs = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
           for i in range(200)]
    lines = ["  " + json.dumps(e) for e in evs]
    lines[150] = lines[150] + ", " + json.dumps({**evs[150], "name": "twin", "ts": 1000})
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    scan = ScanResult()
    chunks = iter_ndjson_chunks(io.BytesIO(path.read_bytes()), scan, chunk_bytes=2000, by_layout=True)
    pieces = b"".join(chunks).splitlines()
    assert scan.split_by_layout > 0
    with pytest.raises(ValueError):
        for piece in pieces:
            json.loads(piece)
    monkeypatch.setattr(jsonscan, "DEFAULT_CHUNK_BYTES", 2000)
    trace = read_kineto(path)
    names = trace.cpu["name"].to_list()
    assert len(names) == 201 and "twin" in names and "op199" in names


def test_layout_split_drops_flows_like_the_scan():
    evs = []
    for i in range(120):
        evs.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "args": {"correlation": i}})
        evs.append({"ph": "f" if i % 2 else "s", "id": i, "ts": i, "cat": "ac2g", "name": "flow"})
    evs.append({"name": "one-liner", "ph": "M"})  # not in the learned layout: left to the decoder
    data = json.dumps({"traceEvents": evs}, indent=2).encode()
    data = data.replace(b'"ph": "M"', b'"ph":"M"')
    for chunk in (300, 1000, 5000):
        scan = ScanResult()
        out = b"".join(iter_ndjson_chunks(io.BytesIO(data), scan, chunk_bytes=chunk,
                                          keep_phases=b"XiI", by_layout=True))
        parsed = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert scan.split_by_layout > 0
        assert parsed == [e for e in evs if e["ph"] in ("X", "M")], chunk


def _real_traces() -> list:
    from tests.support.paths import SAMPLES, public_kineto

    return public_kineto() + sorted((SAMPLES / "torch").glob("*.json.gz"))[:4]


@pytest.mark.slow
@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name)
def test_real_traces_split_alike_by_layout_and_by_scan(path):
    import gzip

    data = gzip.decompress(path.read_bytes())
    chunk = max(4096, len(data) // 20)  # ~20 chunks: the layout path runs on most of them

    def lines(by_layout: bool) -> tuple[list[bytes], ScanResult]:
        scan = ScanResult()
        out = b"".join(iter_ndjson_chunks(io.BytesIO(data), scan, chunk_bytes=chunk,
                                          keep_phases=b"XiI", by_layout=by_layout))
        return [line.strip() for line in out.splitlines() if line.strip()], scan

    (fast, fast_scan), (slow, _) = lines(True), lines(False)
    assert [json.loads(x) for x in fast] == [json.loads(x) for x in slow]
    # Every public trace but the one-line vLLM export is laid out one event per line set.
    if b"\n  {" in data[:100_000] or b"\n    {" in data[:100_000]:
        assert fast_scan.split_by_layout > 0


def _decoded_events(data: bytes, chunk: int, raw_runs: bool, stream=None):
    """The kept events of every piece, decoded (runs in place, NDJSON as lines)."""
    import polars as pl

    from traceanalyzer.ingest.kineto import decode
    from traceanalyzer.ingest.kineto.schema import EVENT_SCHEMA, KEPT_PHASES

    scan = ScanResult()
    frames = []
    for piece in iter_ndjson_chunks(stream or io.BytesIO(data), scan, chunk_bytes=chunk,
                                    keep_phases=b"XiI", by_layout=True, raw_runs=raw_runs):
        runs = isinstance(piece, jsonscan.EventRun)
        frame = decode.decode(piece.data if runs else piece, EVENT_SCHEMA)
        assert frame is not None
        frames.append(frame.filter(pl.col("ph").is_in(KEPT_PHASES)))
    return (pl.concat(frames) if frames else pl.DataFrame(schema=EVENT_SCHEMA)), scan


needs_decoder = pytest.mark.skipif(
    not __import__("traceanalyzer.ingest.kineto.decode").ingest.kineto.decode.AVAILABLE,
    reason="the C event decoder is not built",
)


@needs_decoder
@pytest.mark.parametrize("indent", [1, 2, 4, "\t"])
@pytest.mark.parametrize("chunk", [300, 1000, 4096, 50_000])
def test_runs_cut_in_place_decode_like_the_scan(indent, chunk):
    evs = events(150)
    for i in range(0, 150, 7):
        evs.insert(i, {"ph": "f", "id": i, "ts": i, "cat": "ac2g", "name": "flow"})
    data = json.dumps({"traceEvents": evs, "traceName": "t"}, indent=indent).encode()
    runs, scan = _decoded_events(data, chunk, raw_runs=True)
    lines, _ = _decoded_events(data, chunk, raw_runs=False)
    assert runs.equals(lines) and runs.height == 150
    if 4096 <= chunk < len(data) // 4:  # several events per chunk: the layout is learned
        assert scan.split_by_layout > 0


@needs_decoder
@pytest.mark.parametrize("chunk", [300, 5000, 50_000])
@pytest.mark.parametrize(("tail", "trailer"), [(0, False), (700, False), (700, True),
                                               (256 << 10, True)])
def test_runs_mapped_from_a_file_decode_like_the_scan(tmp_path, monkeypatch, chunk, tail, trailer):
    """A plain file is cut in memory-mapped windows, not read: the same events as the scan of
    the same bytes from a stream, whatever the window size and the tail left to the scan, and
    with objects at the event indent after the array (within the tail; a longer trailer is the
    next test's)."""
    evs = events(400)
    for i in range(0, 400, 9):
        evs.insert(i, {"ph": "f", "id": i, "ts": i, "cat": "ac2g", "name": "flow"})
    extra = {"deviceProperties": [{"id": 0, "name": "GPU"}, {"id": 1}]} if trailer else {}
    data = json.dumps({"schemaVersion": 1, "traceEvents": evs, **extra}, indent=2).encode()
    path = tmp_path / "t.json"
    path.write_bytes(data)
    monkeypatch.setattr(jsonscan, "TAIL_BYTES", tail)
    if trailer and chunk < tail:
        # Since the bounded structural scan (2026-12-02) a window that ends inside the tail can
        # cut its run into the trailer's objects; the decoder rejects that run and the reader
        # reads the file again as a stream (a slower path, recorded as open in
        # docs/reliability.md): what a user gets must still be the reference's frames.
        from tests.support.kineto_reference import reference_read

        monkeypatch.setattr(jsonscan, "DEFAULT_CHUNK_BYTES", chunk)
        fast, slow = read_kineto(path), reference_read(path)
        for name, frame in fast.frames().items():
            assert frame.equals(slow.frames()[name]), name
        return
    mapped = []
    real_mapped_runs = jsonscan._mapped_runs

    def spy(*args):
        runs = real_mapped_runs(*args)
        while True:
            try:
                mapped.append(next(runs))
            except StopIteration as end:
                return end.value
            yield mapped[-1]

    monkeypatch.setattr(jsonscan, "_mapped_runs", spy)
    with open(path, "rb") as fh:
        runs, scan = _decoded_events(data, chunk, raw_runs=True, stream=fh)
    lines, _ = _decoded_events(data, chunk, raw_runs=False)
    assert runs.equals(lines) and runs.height == 400
    assert mapped and scan.split_by_layout >= len(mapped)
    assert json.loads(scan.metadata_json).get("deviceProperties") == extra.get("deviceProperties")


@needs_decoder
def test_objects_after_the_array_beyond_the_tail_are_read_again(tmp_path, monkeypatch):
    """Objects at the event indent after the array, more than TAIL_BYTES of them: the last
    mapped run takes them for events, the decoder rejects it, and the file is read again."""
    from tests.support.kineto_reference import reference_read

    evs = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
           for i in range(300)]
    props = [{"id": i, "name": "GPU", "totalGlobalMem": 1 << 30} for i in range(40)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs, "deviceProperties": props}, indent=2))
    monkeypatch.setattr(jsonscan, "TAIL_BYTES", 100)
    monkeypatch.setattr(jsonscan, "FIRST_READ_BYTES", 4000)
    fast, slow = read_kineto(path), reference_read(path)
    assert fast.meta.extra["read_twice"] and len(fast.meta.devices) == 40
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name


@needs_decoder
def test_run_cut_inside_an_event_is_read_again_with_the_scan(tmp_path, monkeypatch):
    # Later events open their args on a line of its own at the event indent: the layout's cut
    # can land inside such an event. The decoder rejects the run's unfinished last event and the
    # reader starts over with the structural scan, losing nothing.
    normal = ["  " + json.dumps({"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1,
                                 "tid": 1, "ts": i, "dur": 1}) for i in range(100)]
    odd = [f'  {{"ph": "X", "cat": "cpu_op", "name": "late{i}", "pid": 1, "tid": 1, '
           f'"ts": {1000 + i}, "dur": 1, "args":\n  {{"External id": {i}}}}}' for i in range(100)]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(normal + odd) + "\n]}")
    monkeypatch.setattr(jsonscan, "DEFAULT_CHUNK_BYTES", 1500)
    monkeypatch.setattr(jsonscan, "FIRST_READ_BYTES", 1500)
    trace = read_kineto(path)
    assert trace.cpu.height == 200
    assert trace.cpu.filter(trace.cpu["name"] == "late99")["external_id"].to_list() == [99]


@needs_decoder
@settings(max_examples=120, deadline=None)
@given(**TRACES)
def test_property_runs_decode_like_the_scan(n, indent, chunk, names, cut):
    """Runs cut in place by the layout, truncated or not, hold exactly the events the structural
    scan finds, and the decoder takes every one of them."""
    evs = [{"ph": "X", "name": names[i % len(names)], "ts": i, "args": {"External id": i,
            "Input Dims": [[i, 2], []], "other": {"b": names[0]}}} for i in range(n)]
    data = json.dumps({"traceEvents": evs, "z": names}, indent=indent, ensure_ascii=False).encode()
    for body in (data, data[:-cut] if cut else None):
        if body is None or b'"traceEvents": [' not in body:
            continue
        runs, _ = _decoded_events(body, chunk, raw_runs=True)
        lines, _ = _decoded_events(body, chunk, raw_runs=False)
        assert runs.equals(lines)


@pytest.mark.parametrize("pad", [1_000, 65_500, 65_536, 300_000])
def test_metadata_before_the_event_array_past_the_first_read(tmp_path, pad):
    """The first read is 64 KB; metadata before ``traceEvents`` may end before it, across it
    (the key cut in two) or far past it. Each way the frames equal the reference parser's."""
    from tests.support.kineto_reference import reference_read

    assert jsonscan.HEADER_READ_BYTES == 64 << 10
    evs = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
            "args": {"External id": i}} for i in range(3000)]
    head = '{"schemaVersion": 1, "pad": "' + "x" * pad + '",\n'
    path = tmp_path / "t.json"
    path.write_text(head + json.dumps({"traceEvents": evs}, indent=2)[1:])
    fast, slow = read_kineto(path), reference_read(path)
    assert fast.cpu.height == 3000
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name


def test_an_event_longer_than_a_chunk_is_read_whole(tmp_path, monkeypatch):
    """One event (a long Python stack) spans several chunks after the layout is learned."""
    from tests.support.kineto_reference import reference_read

    evs = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
            "args": {"External id": i, "Call stack": "x" * 300_000 if i == 900 else "a.py(1): f"}}
           for i in range(2000)]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs}, indent=2))
    monkeypatch.setattr(jsonscan, "DEFAULT_CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(jsonscan, "FIRST_READ_BYTES", 64 << 10)
    # The decoder keeps a long text's first MAX_TEXT_CHARS + 1 characters (ingest/textcap.py):
    # capped, both readers give the same frames, and the cap's marker ends the stack.
    from traceanalyzer.ingest.textcap import MARKER, MAX_TEXT_CHARS, cap_text

    fast, slow = cap_text(read_kineto(path)), cap_text(reference_read(path))
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name
    stack = fast.cpu.filter(fast.cpu["external_id"] == 900)["call_stack"].item()
    assert len(stack) == MAX_TEXT_CHARS + len(MARKER) and stack.endswith(MARKER)


@needs_decoder
def test_a_wrong_first_guess_of_the_layout_is_read_again(tmp_path, monkeypatch):
    """Every event opens its args on a line at the event indent: the layout guessed from the
    first event cuts inside events, the decoder rejects the run, and the file is read again."""
    from tests.support.kineto_reference import reference_read

    body = ",\n".join(f'  {{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 1, "tid": 1, '
                      f'"ts": {i}, "dur": 1, "args":\n  {{"External id": {i}}}}}' for i in range(300))
    data = ('{"traceEvents": [\n' + body + "\n]}").encode()
    assert jsonscan._guess_layout(bytearray(data[data.index(b"[") + 1:])) == b"\n  {"
    path = tmp_path / "t.json"
    path.write_bytes(data)
    monkeypatch.setattr(jsonscan, "DEFAULT_CHUNK_BYTES", 2000)
    monkeypatch.setattr(jsonscan, "FIRST_READ_BYTES", 2000)
    fast, slow = read_kineto(path), reference_read(path)
    assert fast.cpu.height == 300 and fast.meta.extra["read_twice"]
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name


CUT_WHILE_MAPPED = r"""
import json, os, sys
from pathlib import Path
from traceanalyzer.ingest import read_any
from traceanalyzer.ingest.kineto import jsonscan

path, cut, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
jsonscan.DEFAULT_CHUNK_BYTES = jsonscan.FIRST_READ_BYTES = 64 << 10
jsonscan.TAIL_BYTES = 4 << 10
real_mapped_runs = jsonscan._mapped_runs


def cut_after_the_first_window(*args):
    # The first window is mapped and cut into a run; then the file is cut shorter, inside that
    # run (or before it), before anything decodes it.
    runs = real_mapped_runs(*args)
    first = next(runs)
    os.truncate(path, cut)
    yield first
    return (yield from runs)


jsonscan._mapped_runs = cut_after_the_first_window
if sys.argv[4:] == ["unguarded"]:
    jsonscan.guard_mapping = lambda mapped: -1
trace = read_any(path)
for name, frame in trace.frames().items():
    frame.write_parquet(out / f"{name}.parquet")
print(json.dumps(trace.meta.warnings))
"""


@needs_decoder
@pytest.mark.parametrize("cut_into", ["the run being decoded", "a window not yet mapped"])
def test_a_file_cut_shorter_while_mapped_is_read_as_it_ends_now(tmp_path, cut_into):
    """Another process truncates the trace while it is read: inside the run about to be decoded
    from its memory map (without the guard, SIGBUS; in a child process, so that it would not end
    the test run), or before windows not mapped yet (mapping past the end is an error). Either
    way the read gives what a read of the shorter file gives, and says so."""
    import signal
    import subprocess
    import sys

    import polars as pl

    evs = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
            "args": {"External id": i, "Input Dims": [[i, 2]]}} for i in range(6000)]
    data = json.dumps({"traceEvents": evs}, indent=2).encode()
    # The first window is the array's first 64 KB. Cut at a page boundary: past the end, the
    # rest of the last page reads as zeros and only the next page faults.
    cut = 5 * 4096 if cut_into == "the run being decoded" else 300_000
    assert cut < len(data) - (64 << 10)
    path, out = tmp_path / "t.json", tmp_path / "out"
    path.write_bytes(data)
    out.mkdir()
    child = subprocess.run([sys.executable, "-c", CUT_WHILE_MAPPED, str(path), str(cut), str(out)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    warnings = json.loads(child.stdout)
    assert any("truncated" in w for w in warnings), warnings
    assert f"the file changed while it was being read ({len(data):,} -> {cut:,} bytes)" \
        in " ".join(warnings), warnings
    if cut_into == "the run being decoded":  # the decoder read zeros past the end, not SIGBUS
        path.write_bytes(data)  # and without the guard, the same read dies of SIGBUS
        unguarded = subprocess.run([sys.executable, "-c", CUT_WHILE_MAPPED, str(path), str(cut),
                                    str(out), "unguarded"], capture_output=True, timeout=120)
        # killed by SIGBUS, or under AddressSanitizer its SIGBUS report and exit code
        assert unguarded.returncode == -signal.SIGBUS or (
            unguarded.returncode and b"AddressSanitizer" in unguarded.stderr), unguarded.stderr
    shorter = tmp_path / "shorter.json"
    shorter.write_bytes(data[:cut])
    expected = read_kineto(shorter)
    assert 0 < expected.cpu.height < len(evs)
    for name, frame in expected.frames().items():
        assert pl.read_parquet(out / f"{name}.parquet").equals(frame), name
