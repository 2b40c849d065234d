"""The compiled Perfetto packet walker against the Python decoder, its reference.

The walker (``_perfettowalk.c``) must give the reference's tables exactly (tracks, events, debug
annotations, counters, warnings, packet counts) or decline, and :func:`decode_stream` must then
give the reference's tables anyway. Random packet streams (Hypothesis, built with the
``perfetto`` package's own protos) cover the sequence state: interning per sequence, resets,
packet defaults, sequence-scoped and incremental clocks, counters, legacy events, flows and every
kind of debug annotation, read in chunks of any size.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as TraceProto
from polars.testing import assert_frame_equal

from tests.support.perfetto_builder import RocprofLikeBuilder, mutants, small_rocprof_trace
from traceanalyzer.ingest.perfetto import decode as perfetto_decode
from traceanalyzer.ingest.perfetto import read_perfetto
from traceanalyzer.ingest.perfetto.annotations import ANNOTATION_KEYS
from traceanalyzer.ingest.perfetto.decode import DecodeError, RawTables, decode_stream
from traceanalyzer.ingest.perfetto.map import annotation_columns, pair_slices, paired_slices

pytestmark = pytest.mark.skipif(not perfetto_decode.WALKER_AVAILABLE,
                                reason="the compiled walker is not built")


def _both(data: bytes, chunk_bytes: int | None = None) -> tuple[RawTables | str, RawTables | None | str]:
    """(reference, walker) tables of ``data``; "error" where the reader raises DecodeError."""
    out: list = []
    for walker in (False, True):
        try:
            out.append(decode_stream(io.BytesIO(data), chunk_bytes, walker=walker))
        except DecodeError:
            out.append("error")
    return out[0], out[1]


def assert_same_tables(ref: RawTables, got: RawTables) -> None:
    for name in ("tracks", "events", "counters"):
        assert_frame_equal(getattr(got, name), getattr(ref, name), check_exact=True)
    # the walker types most values itself and keeps only the first of a key for an event
    assert_frame_equal(annotation_columns(got), annotation_columns(ref), check_exact=True)
    # and pairs slices as their events come, while each track's come in time order
    slices, unended, orphan_ends = pair_slices(ref.events)
    if got.slice_pairs is not None:
        assert_frame_equal(paired_slices(got.events, got.slice_pairs), slices, check_exact=True)
        assert (got.unended, got.orphan_ends) == (unended, orphan_ends)
    assert got.warnings == ref.warnings
    assert (got.packets, got.bytes_read) == (ref.packets, ref.bytes_read)
    assert (ref.decoder, got.decoder) == ("python", "walker")


# -- random packet streams --------------------------------------------------------------------

_U64 = st.integers(0, 2**64 - 1)
_SMALL = st.integers(0, 6)
_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_ANN_NAMES = st.sampled_from([*ANNOTATION_KEYS, "unread", "begin_ns"])


def _annotation(ann: object, draw: st.DrawFn) -> None:
    if draw(st.booleans()):
        ann.name_iid = draw(_SMALL)  # type: ignore[attr-defined]
    else:
        ann.name = draw(_ANN_NAMES)  # type: ignore[attr-defined]
    kind = draw(st.sampled_from(["int", "uint", "bool", "double", "string", "iid", "pointer",
                                 "json", "array", "none"]))
    if kind == "int":
        ann.int_value = draw(st.integers(-(2**63), 2**63 - 1))  # type: ignore[attr-defined]
    elif kind == "uint":
        ann.uint_value = draw(_U64)  # type: ignore[attr-defined]
    elif kind == "bool":
        ann.bool_value = draw(st.booleans())  # type: ignore[attr-defined]
    elif kind == "double":
        ann.double_value = draw(st.floats(allow_nan=False))  # type: ignore[attr-defined]
    elif kind == "string":
        ann.string_value = draw(_TEXT)  # type: ignore[attr-defined]
    elif kind == "iid":
        ann.string_value_iid = draw(_SMALL)  # type: ignore[attr-defined]
    elif kind == "pointer":
        ann.pointer_value = draw(_U64)  # type: ignore[attr-defined]
    elif kind == "json":
        ann.legacy_json_value = draw(_TEXT)  # type: ignore[attr-defined]
    elif kind == "array":
        for value in draw(st.lists(st.integers(0, 2**40), max_size=3)):
            ann.array_values.add().int_value = value  # type: ignore[attr-defined]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


#: Debug annotations as raw bytes, well formed or not: the first-field shortcut, more fields than
#: the scan reads, wire types that do not match, names both interned and inline, cut values.
_RAW_FIELD = st.tuples(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 17, 99]),
                       st.sampled_from([0, 0, 1, 2, 2, 3, 5, 7]), st.binary(max_size=10),
                       st.integers(0, 2**64 - 1))
_RAW_ANNOTATION = st.one_of(
    st.binary(max_size=24),
    st.lists(_RAW_FIELD, max_size=10).map(lambda fields: b"".join(
        _varint(number << 3 | wire)
        + (_varint(value) if wire == 0 else _varint(len(data)) + data if wire == 2 else data)
        for number, wire, data, value in fields)),
)


@st.composite
def packet_streams(draw: st.DrawFn) -> bytes:
    trace = TraceProto()
    raw_annotations: dict[int, list[bytes]] = {}
    for n in range(draw(st.integers(1, 40))):
        pkt = trace.packet.add()
        if draw(st.integers(0, 4)):
            pkt.trusted_packet_sequence_id = draw(st.integers(1, 3))
        flags = draw(st.sampled_from([0, 0, 1, 2, 3]))
        if flags:
            pkt.sequence_flags = flags
        if draw(st.integers(0, 9)) == 0:
            pkt.incremental_state_cleared = True
        if draw(st.integers(0, 19)) == 0:
            pkt.previous_packet_dropped = 1
        if draw(st.integers(0, 2)) == 0:
            data = pkt.interned_data
            for _ in range(draw(st.integers(0, 3))):
                entry = data.event_names.add()
                entry.iid, entry.name = draw(_SMALL), draw(_TEXT)
            for _ in range(draw(st.integers(0, 2))):
                entry = data.event_categories.add()
                entry.iid, entry.name = draw(_SMALL), draw(st.sampled_from(
                    ["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "x"]))
            for _ in range(draw(st.integers(0, 3))):
                entry = data.debug_annotation_names.add()
                entry.iid, entry.name = draw(_SMALL), draw(_ANN_NAMES)
            for _ in range(draw(st.integers(0, 2))):
                entry = data.debug_annotation_string_values.add()
                entry.iid, entry.str = draw(_SMALL), draw(st.binary(max_size=6))
        if draw(st.integers(0, 5)) == 0:
            defaults = pkt.trace_packet_defaults
            defaults.timestamp_clock_id = draw(st.sampled_from([0, 6, 64, 65, 200]))
            ted = defaults.track_event_defaults
            ted.track_uuid = draw(_SMALL)
            ted.extra_counter_track_uuids.extend(draw(st.lists(_SMALL, max_size=2)))
            ted.extra_double_counter_track_uuids.extend(draw(st.lists(_SMALL, max_size=2)))
        what = draw(st.sampled_from(["event"] * 6 + ["track", "clock", "nothing"]))
        if what == "track":
            desc = pkt.track_descriptor
            desc.uuid = draw(st.one_of(_SMALL, _U64))
            if draw(st.booleans()):
                desc.parent_uuid = draw(_SMALL)
            naming = draw(st.sampled_from(["name", "static_name", "atrace_name", None]))
            if naming:
                setattr(desc, naming, draw(_TEXT))
            if draw(st.booleans()):
                desc.process.pid = draw(st.integers(-(2**31), 2**31 - 1))
                if draw(st.booleans()):
                    desc.process.process_name = draw(_TEXT)
            if draw(st.booleans()):
                desc.thread.pid = draw(st.integers(0, 99))
                desc.thread.tid = draw(st.integers(-(2**40), 2**40))
                if draw(st.booleans()):
                    desc.thread.thread_name = draw(_TEXT)
            if draw(st.booleans()):
                desc.counter.SetInParent()
        elif what == "clock":
            snap = pkt.clock_snapshot
            if draw(st.booleans()):
                snap.primary_trace_clock = draw(st.sampled_from([1, 3, 6]))
            for _ in range(draw(st.integers(0, 3))):
                clock = snap.clocks.add()
                clock.clock_id = draw(st.sampled_from([3, 6, 64, 65, 130]))
                clock.timestamp = draw(st.integers(0, 2**40))
                if draw(st.booleans()):
                    clock.is_incremental = True
                if draw(st.booleans()):
                    clock.unit_multiplier_ns = draw(st.integers(0, 1000))
        elif what == "event":
            pkt.timestamp = draw(st.integers(0, 2**44))
            if draw(st.integers(0, 4)) == 0:
                pkt.timestamp_clock_id = draw(st.sampled_from([6, 64, 65, 127, 200]))
            te = pkt.track_event
            te.type = draw(st.sampled_from([0, 1, 1, 2, 2, 3, 4]))
            if draw(st.booleans()):
                te.track_uuid = draw(_SMALL)
            if draw(st.booleans()):
                te.name_iid = draw(_SMALL)
            elif draw(st.booleans()):
                te.name = draw(_TEXT)
            if draw(st.booleans()):
                te.category_iids.extend(draw(st.lists(_SMALL, max_size=2)))
            else:
                te.categories.extend(draw(st.lists(_TEXT, max_size=2)))
            counter = draw(st.sampled_from(["int", "double", None]))
            if counter == "int":
                te.counter_value = draw(st.integers(-(2**63), 2**63 - 1))
            elif counter == "double":
                te.double_counter_value = draw(st.floats(allow_nan=False))
            if draw(st.integers(0, 3)) == 0:
                te.extra_counter_track_uuids.extend(draw(st.lists(_SMALL, max_size=2)))
                te.extra_counter_values.extend(draw(st.lists(st.integers(-99, 99), max_size=2)))
                te.extra_double_counter_values.extend(draw(st.lists(st.floats(-9, 9), max_size=2)))
            for field in ("flow_ids", "terminating_flow_ids", "flow_ids_old",
                          "terminating_flow_ids_old"):
                if draw(st.integers(0, 3)) == 0:
                    getattr(te, field).extend(draw(st.lists(_U64, max_size=2)))
            if draw(st.integers(0, 3)) == 0:
                te.correlation_id = draw(st.integers(0, 2**63 - 1))
            if draw(st.integers(0, 3)) == 0:
                te.legacy_event.phase = draw(st.sampled_from([ord("X"), ord("B"), ord("E"),
                                                              ord("i"), 0]))
                te.legacy_event.duration_us = draw(st.integers(-(10**9), 10**12))
            for _ in range(draw(st.integers(0, 3))):
                _annotation(te.debug_annotations.add(), draw)
            if draw(st.integers(0, 3)) == 0:
                raw_annotations[n] = draw(st.lists(_RAW_ANNOTATION, min_size=1, max_size=3))
    out = bytearray()
    for n, pkt in enumerate(trace.packet):
        data = pkt.SerializeToString()
        if n in raw_annotations:  # appended to the track event: the protos cannot hold them
            extra = b"".join(b"\x22" + _varint(len(a)) + a for a in raw_annotations[n])
            te = pkt.track_event.SerializeToString() + extra
            pkt.ClearField("track_event")
            data = pkt.SerializeToString() + b"\x5a" + _varint(len(te)) + te
        out += b"\x0a" + _varint(len(data)) + data
    return bytes(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=packet_streams(), chunk=st.sampled_from([None, 7, 64, 1000]))
def test_random_streams_read_as_the_reference_reads_them(data: bytes, chunk: int | None) -> None:
    ref, got = _both(data, chunk)
    if ref == "error":  # not a packet stream at all (nothing decodable): the walker gives way
        assert got in ("error", None)
        return
    if got is None:  # declined: only for what the reference reads differently (see the C file)
        walker = perfetto_decode.WalkDecoder()
        assert walker.feed(data) == -1
        assert any(why in walker.walker.declined for why in ("UTF-8", "beyond 32 bits"))
        return
    assert_same_tables(ref, got)


# -- real layouts ----------------------------------------------------------------------------

def test_rocprof_layout_reads_as_the_reference_reads_it() -> None:
    b = RocprofLikeBuilder()
    for i in range(50):
        b.hip_api(4242 + i % 3, i * 100, i * 100 + 50, "hipLaunchKernel", i)
        b.kernel(0, i % 2, i * 100 + 60, i * 100 + 90, f"k{i % 5}", i)
        b.copy(1, 0, i * 100 + 91, i * 100 + 99, i, 4096)
    ref, got = _both(b.serialize(), 1000)
    assert_same_tables(ref, got)  # type: ignore[arg-type]


def test_mutated_streams_read_as_the_reference_reads_them() -> None:
    walked = 0
    for mutant in mutants(small_rocprof_trace(), seed=99, count=150):
        ref, got = _both(mutant)
        if got is None or ref == "error":
            continue
        assert_same_tables(ref, got)  # type: ignore[arg-type]
        walked += 1
    assert walked > 40  # cut streams (truncation) are the walker's to read


# -- what the walker leaves to the reference -------------------------------------------------

def _event_packet(trace: TraceProto, name: str = "k") -> object:
    pkt = trace.packet.add()
    pkt.trusted_packet_sequence_id = 1
    pkt.timestamp = 10
    pkt.track_event.type = 3
    pkt.track_event.name = name
    return pkt


def _declined_streams() -> dict[str, bytes]:
    plain = TraceProto()
    _event_packet(plain)
    base = plain.SerializeToString()
    inner = TraceProto()
    _event_packet(inner, "inner")
    compressed = TraceProto()
    compressed.packet.add().compressed_packets = zlib.compress(inner.SerializeToString())
    event = plain.packet[0].track_event.SerializeToString()
    twice = plain.packet[0].SerializeToString() + b"\x5a" + bytes([len(event)]) + event
    bad_name = bytearray(base)
    bad_name[base.index(b"k")] = 0xFF
    return {
        "compressed packets": compressed.SerializeToString(),
        "a track event given twice (protobuf merges the two)": b"\x0a" + bytes([len(twice)]) + twice,
        "an event name that is not UTF-8": bytes(bad_name),
        "a top-level field other than packet": base + b"\x10\x01",
        "a correlation id beyond int64": _huge_event(correlation_id=2**63),
        "a legacy duration beyond int64 ns": _huge_event(duration_us=2**62),
    }


def _huge_event(**fields: int) -> bytes:
    trace = TraceProto()
    te = _event_packet(trace).track_event  # type: ignore[attr-defined]
    for name, value in fields.items():
        if name == "duration_us":
            te.type = 0
            te.legacy_event.phase = ord("X")
            te.legacy_event.duration_us = value
        else:
            setattr(te, name, value)
    return trace.SerializeToString()


#: (annotation name, value field, value) per event: values the walker types itself, values it
#: leaves to the reference's typing, and a key given twice in either order.
_TYPED_CASES = [
    [("corr_id", "uint_value", 7), ("corr_id", "string_value", "8")],
    [("corr_id", "string_value", "9"), ("corr_id", "int_value", -3)],
    [("queue", "uint_value", 2**63), ("agent", "uint_value", 2**63),
     ("stream", "bool_value", True)],
    [("queue", "double_value", 2.0), ("device", "double_value", 2.5),
     ("stream", "double_value", 1e19), ("agent", "double_value", 4.0)],
    [("agent", "int_value", -12), ("kind", "pointer_value", 2**64 - 1),
     ("copy_kind", "string_value", "HtoD"), ("bytes", "string_value", "12")],
    [("agent", "string_value_iid", 5), ("agent", "string_value_iid", 6),
     ("queue", "string_value_iid", 5)],
]


def test_values_the_walker_types_read_as_the_reference_types_them() -> None:
    trace = TraceProto()
    for n, case in enumerate(_TYPED_CASES):
        te = _event_packet(trace, f"e{n}").track_event  # type: ignore[attr-defined]
        for name, field, value in case:
            ann = te.debug_annotations.add()
            ann.name = name
            setattr(ann, field, value)
    ref, got = _both(trace.SerializeToString())
    assert_same_tables(ref, got)  # type: ignore[arg-type]
    assert got.int_values.height and got.str_values.height  # type: ignore[union-attr]
    assert any("never defined" in w for w in got.warnings)  # type: ignore[union-attr]
    columns = annotation_columns(got)  # type: ignore[arg-type]
    assert columns["correlation"].to_list()[:2] == [7, 9]
    assert columns["agent"].to_list()[2:5] == [str(2**63), "4.0", "-12"]
    assert columns["queue"].to_list()[2:4] == [None, 2]


def _slice_stream(events: list[tuple[int, int, int]]) -> bytes:
    """Track events (track, type, ts) of one sequence: 1 begin, 2 end."""
    trace = TraceProto()
    for n, (track, kind, ts) in enumerate(events):
        pkt = trace.packet.add()
        pkt.trusted_packet_sequence_id = 1
        pkt.timestamp = ts
        pkt.track_event.type, pkt.track_event.track_uuid = kind, track
        if kind == 1:
            pkt.track_event.name = f"s{n}"
    return trace.SerializeToString()


@pytest.mark.parametrize("ordered", [True, False])
def test_slices_paired_as_they_come_as_pair_slices_pairs_them(ordered: bool) -> None:
    # nested, an end with no begin, a begin never ended, equal times, two tracks interleaved
    events = [(1, 1, 10), (2, 1, 10), (1, 1, 10), (1, 2, 20), (2, 2, 20), (2, 2, 25),
              (1, 2, 30), (1, 2, 30), (1, 1, 40), (2, 1, 50), (2, 2, 60), (1, 1, 70)]
    if not ordered:
        events.append((2, 1, 55))  # before track 2's last event: the walker leaves the pairing
    ref, got = _both(_slice_stream(events))
    assert_same_tables(ref, got)  # type: ignore[arg-type]
    assert (got.slice_pairs is not None) is ordered  # type: ignore[union-attr]
    slices, unended, orphan_ends = pair_slices(ref.events)  # type: ignore[union-attr]
    assert (slices.height, unended, orphan_ends) == ((4, 2, 2) if ordered else (4, 3, 2))


def test_numbers_beyond_the_columns_are_skipped_or_kept_as_text() -> None:
    trace = TraceProto()
    _event_packet(trace, "fine")
    _event_packet(trace, "too late").timestamp = 2**63  # type: ignore[attr-defined]
    ref, got = _both(trace.SerializeToString())
    assert_same_tables(ref, got)  # type: ignore[arg-type]
    assert ref.events["name"].to_list() == ["fine"]  # type: ignore[union-attr]
    assert any("beyond int64" in w for w in ref.warnings)  # type: ignore[union-attr]
    for case in ("a correlation id beyond int64", "a legacy duration beyond int64 ns"):
        raw = decode_stream(io.BytesIO(_declined_streams()[case]))
        assert raw.annotations.select("key", "int_value", "str_value").rows() == (
            [("correlation", None, str(2**63))] if "correlation" in case else [("_dur", None, None)])


@pytest.mark.parametrize("case", list(_declined_streams()))
def test_declined_streams_are_read_by_the_reference(case: str) -> None:
    data = _declined_streams()[case]
    assert decode_stream(io.BytesIO(data), walker=True) is None
    ref = decode_stream(io.BytesIO(data), walker=False)
    auto = decode_stream(io.BytesIO(data))
    assert auto.decoder == "python"
    for name in ("tracks", "events", "annotations", "counters"):
        assert_frame_equal(getattr(auto, name), getattr(ref, name))
    assert auto.warnings == ref.warnings


def test_gzipped_declined_stream_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace.gz"
    path.write_bytes(gzip.compress(_declined_streams()["compressed packets"]))
    with gzip.open(path, "rb") as fh:
        raw = decode_stream(fh)
    assert (raw.decoder, raw.events["name"].to_list()) == ("python", ["inner"])


def test_gzipped_trace_is_walked(tmp_path: Path) -> None:
    b = RocprofLikeBuilder()
    b.hip_api(4242, 0, 50, "hipLaunchKernel", 1)
    b.kernel(0, 0, 60, 90, "k", 1)
    path = tmp_path / "t.pftrace.gz"
    path.write_bytes(gzip.compress(b.serialize()))
    with gzip.open(path, "rb") as fh:
        assert decode_stream(fh).decoder == "walker"
    plain = tmp_path / "t.pftrace"
    plain.write_bytes(b.serialize())
    assert read_perfetto(path).gpu.equals(read_perfetto(plain).gpu)


def test_without_the_walker_the_reference_reads_everything(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    b = RocprofLikeBuilder()
    b.hip_api(4242, 0, 50, "hipLaunchKernel", 1)
    b.kernel(0, 0, 60, 90, "k", 1)
    path = b.write(tmp_path / "t.pftrace")
    walked = read_perfetto(path)
    monkeypatch.setattr(perfetto_decode, "WALKER_AVAILABLE", False)
    with open(path, "rb") as fh:
        assert decode_stream(fh).decoder == "python"
    assert read_perfetto(path).gpu.equals(walked.gpu)
