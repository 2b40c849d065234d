"""Decode a Perfetto ``TracePacket`` stream into raw column tables, one pass, bounded memory.

A Perfetto trace file is the protobuf ``Trace`` message: a concatenation of ``packet`` fields
(field 1, length-delimited). Any run of complete packet records is itself a valid ``Trace``, so we
read the file in chunks, find the last complete packet in each chunk by walking the length
prefixes, and hand that prefix to the C protobuf parser in one call. That keeps the per-byte work
in C while never holding more than one chunk of decoded messages.

What comes out is deliberately close to the wire: tracks as described, one row per TrackEvent
(begin, end, instant, complete), counter samples, and a long table of the debug annotations we
recognise. Turning that into canonical frames is :mod:`traceanalyzer.ingest.perfetto_map`'s job,
so the trace_processor route can share it.

Two decoders produce those tables. The compiled packet walker (``_perfettowalk.c``) reads the
packets into column buffers with no Python object per packet; the Python decoder here
(:class:`_Decoder`, per packet through the protobuf classes) is the reference it must equal, and
reads every stream the walker declines (see :func:`decode_stream`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import polars as pl
import pyarrow as pa

from traceanalyzer.ingest.perfetto_annotations import (
    ANNOTATION_KEYS,
    KEY_NAMES,
    RAW_CODES,
    UNKNOWN_NAME,
    AnnotationDecoding,
)
from traceanalyzer.ingest.perfetto_light import light_classes

try:
    from traceanalyzer.ingest import _perfettowalk
except ImportError:  # pragma: no cover - depends on how the package was installed
    _perfettowalk = None

WALKER_AVAILABLE = _perfettowalk is not None

__all__ = ["ANNOTATION_KEYS", "UNKNOWN_NAME", "DecodeError", "RawTables", "decode_stream"]


#: Internal event type for legacy complete events (phase 'X' with a duration).
TYPE_COMPLETE = 9
TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2
TYPE_INSTANT = 3
TYPE_COUNTER = 4

SEQ_INCREMENTAL_STATE_CLEARED = 1
#: Clock ids 64..127 are scoped to one packet sequence (ClockSnapshot docs).
_SEQUENCE_CLOCK_MIN = 64
_SEQUENCE_CLOCK_MAX = 127
_BOOTTIME = 6
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1



def _text(value: Any) -> Any:
    """Strings from the trace as ``str``: protobuf hands back ``bytes`` for invalid UTF-8."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _string_series(values: list[Any]) -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.String)
    except (TypeError, ValueError, pl.exceptions.PolarsError):
        return pl.Series([_text(v) for v in values], dtype=pl.String)


class DecodeError(Exception):
    """The bytes are not a Perfetto packet stream (raised before any packet was read)."""


#: Column types of the raw tables, shared by both decoders and the trace_processor route (the
#: events table also has a leading ``idx``: UInt32).
TRACK_SCHEMA = {"uuid": pl.UInt64, "parent_uuid": pl.UInt64, "name": pl.String, "pid": pl.Int64,
                "tid": pl.Int64, "process_name": pl.String, "thread_name": pl.String,
                "is_counter": pl.Boolean}
EVENT_SCHEMA = {"ts": pl.Int64, "type": pl.Int8, "track": pl.UInt64, "name": pl.String,
                "category": pl.String, "flow": pl.UInt64}
ANNOTATION_SCHEMA = {"idx": pl.UInt32, "key": pl.String, "int_value": pl.Int64,
                     "str_value": pl.String}
COUNTER_SCHEMA = {"track": pl.UInt64, "ts": pl.Int64, "value": pl.Float64}


def _rows(columns: dict[str, list[Any]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A frame of ``schema`` from Python lists (text through :func:`_string_series`)."""
    return pl.DataFrame({
        name: _string_series(columns[name]) if dtype == pl.String
        else pl.Series(columns[name], dtype=dtype)
        for name, dtype in schema.items()
    })


@dataclass
class RawTables:
    """A decoded trace, still in Perfetto's terms."""

    tracks: pl.DataFrame  # uuid, parent_uuid, name, pid, tid, process_name, thread_name, is_counter
    events: pl.DataFrame  # idx, ts, type, track, name, category, flow
    annotations: pl.DataFrame  # idx, key, int_value, str_value (long format)
    counters: pl.DataFrame  # track, ts, value
    warnings: list[str] = field(default_factory=list)
    packets: int = 0
    bytes_read: int = 0
    decoder: str = "python"  # or "walker": which decoder read the stream




@dataclass
class _Sequence:
    """Incremental state of one ``trusted_packet_sequence_id``."""

    gen: int  # changes at every incremental-state reset; keys interned annotation names
    names: dict[int, str] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)
    default_track: int = 0
    default_counter_tracks: list[int] = field(default_factory=list)
    clock_id: int = 0
    # sequence-scoped clocks: id -> [is_incremental, unit_ns, current_value, global_base, local_base]
    clocks: dict[int, list[Any]] = field(default_factory=dict)

    def clear(self, gen: int) -> None:
        self.gen = gen
        self.names = {}
        self.categories = {}
        self.default_track = 0
        self.default_counter_tracks = []
        self.clock_id = 0
        self.clocks = {}


class _Decoder(AnnotationDecoding):
    def __init__(self) -> None:
        self._trace_cls, annotation_cls = light_classes()
        self._init_annotations(annotation_cls)
        self.seqs: dict[int, _Sequence] = {}
        self._gens = 0
        # events
        self.ev_ts: list[int] = []
        self.ev_type: list[int] = []
        self.ev_track: list[int] = []
        self.ev_name: list[str | None] = []
        self.ev_cat: list[str | None] = []
        self.ev_flow: list[int | None] = []
        self.ev_parts: list[pl.DataFrame] = []
        self.ev_base = 0  # events already moved into ev_parts
        # debug annotations built in Python (long format); the mixin adds per-chunk frames
        self.an_idx: list[int] = []
        self.an_key: list[str] = []
        self.an_int: list[int | None] = []
        self.an_str: list[str | None] = []
        # counters
        self.ct_track: list[int] = []
        self.ct_ts: list[int] = []
        self.ct_value: list[float] = []
        self.tracks: dict[int, tuple[Any, ...]] = {}
        self.dropped = 0
        self.unknown_clock = 0
        self.bad_timestamps = 0
        self.packets = 0

    def _new_gen(self) -> int:
        self._gens += 1
        return self._gens

    # -- packets -----------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Decode a buffer holding only complete packet records."""
        trace = self._trace_cls.FromString(data)
        self._packets(trace.packet)
        del trace
        self._flush_events()
        self.flush_annotations()

    def _packets(self, packets: Any) -> None:
        # The hot loop: one iteration per packet, so attribute look-ups are hoisted into locals.
        seqs = self.seqs
        ev_ts, ev_type, ev_track = self.ev_ts.append, self.ev_type.append, self.ev_track.append
        ev_name, ev_cat, ev_flow = self.ev_name.append, self.ev_cat.append, self.ev_flow.append
        blobs_extend = self.blobs.extend
        blob_event, blob_gen = self.blob_event.append, self.blob_gen.append
        blob_count = self.blob_count.append
        last_seq_id = -1
        seq = None
        for pkt in packets:
            seq_id = pkt.trusted_packet_sequence_id
            if seq_id != last_seq_id:
                seq = seqs.get(seq_id)
                if seq is None:
                    seq = seqs[seq_id] = _Sequence(self._new_gen())
                last_seq_id = seq_id
            flags = pkt.sequence_flags
            # incremental_state_cleared is the legacy spelling, used by producers without flags
            if flags & SEQ_INCREMENTAL_STATE_CLEARED or (
                not flags and pkt.incremental_state_cleared
            ):
                seq.clear(self._new_gen())
            if pkt.previous_packet_dropped:
                self.dropped += 1
            if pkt.HasField("interned_data"):
                self._intern(seq, pkt.interned_data)
            if not pkt.HasField("track_event"):
                self._other_packet(seq, pkt)
                continue
            if flags & SEQ_INCREMENTAL_STATE_CLEARED and pkt.HasField("trace_packet_defaults"):
                self._defaults(seq, pkt.trace_packet_defaults)
            te = pkt.track_event
            ts = pkt.timestamp
            if seq.clock_id or pkt.timestamp_clock_id:
                ts = self._timestamp(seq, pkt)
            if not _INT64_MIN <= ts <= _INT64_MAX:  # a uint64 (or a clock) beyond the columns
                self.bad_timestamps += 1
                continue
            etype = te.type
            if not -128 <= etype <= 127:  # no type we read (they fit the Int8 column)
                continue
            track = te.track_uuid or seq.default_track
            if etype == TYPE_SLICE_END:
                ev_ts(ts)
                ev_type(etype)
                ev_track(track)
                ev_name(None)
                ev_cat(None)
                ev_flow(None)
                continue
            if etype == TYPE_COUNTER or etype == 0 or te.extra_counter_values or (
                te.extra_double_counter_values
            ):
                etype = self._unusual_event(seq, te, ts, etype)
                if etype is None:
                    continue
            idx = self.ev_base + len(self.ev_ts)
            iid = te.name_iid
            if iid:
                name = seq.names.get(iid)
                if name is None:
                    self.unknown_iids += 1
                    name = UNKNOWN_NAME
            else:
                name = te.name
            cat_iids = te.category_iids
            if cat_iids:
                cat = seq.categories.get(cat_iids[0])
                if cat is None:
                    self.unknown_iids += 1
                    cat = UNKNOWN_NAME
            else:
                cats = te.categories
                cat = cats[0] if cats else None
            flows = te.flow_ids or te.terminating_flow_ids or te.flow_ids_old
            ev_ts(ts)
            ev_type(etype)
            ev_track(track)
            ev_name(name)
            ev_cat(cat)
            ev_flow(flows[0] if flows else None)
            anns = te.debug_annotations
            if anns:
                blobs_extend(anns)
                blob_event(idx)
                blob_gen(seq.gen)
                blob_count(len(anns))
            corr = te.correlation_id  # 0 when unset
            if corr:  # a uint64: beyond int64 it is text, as for a debug annotation
                if corr <= _INT64_MAX:
                    self._annotation(idx, "correlation", corr, None)
                else:
                    self._annotation(idx, "correlation", None, str(corr))
            if etype == TYPE_COMPLETE:
                dur = te.legacy_event.duration_us * 1000
                self._annotation(idx, "_dur", dur if _INT64_MIN <= dur <= _INT64_MAX else None,
                                 None)
        self.packets += len(packets)

    def _other_packet(self, seq: _Sequence, pkt: Any) -> None:
        if pkt.HasField("trace_packet_defaults"):
            self._defaults(seq, pkt.trace_packet_defaults)
        if pkt.HasField("track_descriptor"):
            self._track_descriptor(pkt.track_descriptor)
        elif pkt.HasField("clock_snapshot"):
            self._clock_snapshot(seq, pkt.clock_snapshot)
        elif pkt.HasField("compressed_packets"):
            try:
                inner = self._trace_cls.FromString(zlib.decompress(pkt.compressed_packets))
            except Exception:  # noqa: BLE001 - a corrupt blob is a warning, not a crash
                self.dropped += 1
            else:
                self._packets(inner.packet)

    def _unusual_event(self, seq: _Sequence, te: Any, ts: int, etype: int) -> int | None:
        """Counters, extra counter values and legacy events: the type to record, or None."""
        if etype == TYPE_COUNTER:
            value = (
                te.double_counter_value
                if te.HasField("double_counter_value")
                else float(te.counter_value)
            )
            self.ct_track.append(te.track_uuid or seq.default_track)
            self.ct_ts.append(ts)
            self.ct_value.append(value)
            return None
        if te.extra_counter_values or te.extra_double_counter_values:
            self._extra_counters(seq, te, ts)
        if etype == 0:
            if not te.HasField("legacy_event"):
                return None
            phase = te.legacy_event.phase
            if phase == 88:  # 'X': complete event
                return TYPE_COMPLETE
            if phase == 66:  # 'B'
                return TYPE_SLICE_BEGIN
            if phase == 69:  # 'E'
                return TYPE_SLICE_END
            return None
        return etype

    def _intern(self, seq: _Sequence, data: Any) -> None:
        for entry in data.event_names:
            seq.names[entry.iid] = entry.name
        for entry in data.event_categories:
            seq.categories[entry.iid] = entry.name
        if data.debug_annotation_names:
            names = self.ann_names.setdefault(seq.gen, {})
            for entry in data.debug_annotation_names:
                names[entry.iid] = entry.name
        if data.debug_annotation_string_values:
            strings = self.ann_strings.setdefault(seq.gen, {})
            for entry in data.debug_annotation_string_values:
                strings[entry.iid] = entry.str.decode("utf-8", "replace")

    def _defaults(self, seq: _Sequence, defaults: Any) -> None:
        seq.clock_id = defaults.timestamp_clock_id
        ted = defaults.track_event_defaults
        seq.default_track = ted.track_uuid
        seq.default_counter_tracks = list(ted.extra_counter_track_uuids) + list(
            ted.extra_double_counter_track_uuids
        )

    def _clock_snapshot(self, seq: _Sequence, snap: Any) -> None:
        global_value = None
        primary = snap.primary_trace_clock or _BOOTTIME
        for clock in snap.clocks:
            if clock.clock_id == primary:
                global_value = clock.timestamp
        for clock in snap.clocks:
            if global_value is None and clock.clock_id < _SEQUENCE_CLOCK_MIN:
                global_value = clock.timestamp
        for clock in snap.clocks:
            if _SEQUENCE_CLOCK_MIN <= clock.clock_id <= _SEQUENCE_CLOCK_MAX:
                unit = clock.unit_multiplier_ns or 1
                local = clock.timestamp * unit
                base = global_value if global_value is not None else local
                seq.clocks[clock.clock_id] = [clock.is_incremental, unit, local, base, local]

    def _timestamp(self, seq: _Sequence, pkt: Any) -> int:
        ts = pkt.timestamp
        clock_id = pkt.timestamp_clock_id or seq.clock_id
        if clock_id < _SEQUENCE_CLOCK_MIN:
            return ts
        state = seq.clocks.get(clock_id)
        if state is None:
            self.unknown_clock += 1
            return ts
        incremental, unit, current, global_base, local_base = state
        current = current + ts * unit if incremental else ts * unit
        state[2] = current
        return global_base + (current - local_base)

    def _track_descriptor(self, desc: Any) -> None:
        pid = tid = None
        process_name = thread_name = None
        if desc.HasField("process"):
            pid = desc.process.pid
            process_name = desc.process.process_name or None
        if desc.HasField("thread"):
            pid = desc.thread.pid
            tid = desc.thread.tid
            thread_name = desc.thread.thread_name or None
        name = desc.name or desc.static_name or desc.atrace_name or None
        self.tracks[desc.uuid] = (
            desc.uuid,
            desc.parent_uuid or None,
            name,
            pid,
            tid,
            process_name,
            thread_name,
            desc.HasField("counter"),
        )

    def _extra_counters(self, seq: _Sequence, te: Any, ts: int) -> None:
        tracks = list(te.extra_counter_track_uuids) + list(te.extra_double_counter_track_uuids)
        tracks = tracks or seq.default_counter_tracks
        values = [float(v) for v in te.extra_counter_values] + list(te.extra_double_counter_values)
        for track, value in zip(tracks, values, strict=False):
            self.ct_track.append(track)
            self.ct_ts.append(ts)
            self.ct_value.append(value)

    def _annotation(self, idx: int, key: str, int_value: int | None, str_value: str | None) -> None:
        self.an_idx.append(idx)
        self.an_key.append(key)
        self.an_int.append(int_value)
        self.an_str.append(str_value)


    # -- result ------------------------------------------------------------------------------

    def _flush_events(self) -> None:
        """Move the chunk's event columns from Python lists into a frame (far more compact)."""
        self.ev_parts.append(_rows({"ts": self.ev_ts, "type": self.ev_type, "track": self.ev_track,
                                    "name": self.ev_name, "category": self.ev_cat,
                                    "flow": self.ev_flow}, EVENT_SCHEMA))
        self.ev_base += len(self.ev_ts)
        self.ev_ts, self.ev_type, self.ev_track = [], [], []
        self.ev_name, self.ev_cat, self.ev_flow = [], [], []

    def tables(self) -> RawTables:
        self.flush_annotations()
        self._flush_events()
        python_rows = _rows({"idx": self.an_idx, "key": self.an_key, "int_value": self.an_int,
                             "str_value": self.an_str}, ANNOTATION_SCHEMA)
        counters = _rows({"track": self.ct_track, "ts": self.ct_ts, "value": self.ct_value},
                         COUNTER_SCHEMA)
        return _raw_tables(self.tracks, self.ev_parts, [python_rows, *self.an_parts], counters,
                           unknown_iids=self.unknown_iids, dropped=self.dropped,
                           unknown_clock=self.unknown_clock, bad_timestamps=self.bad_timestamps,
                           packets=self.packets)


def _raw_tables(tracks: dict[int, tuple[Any, ...]], events: list[pl.DataFrame],
                annotations: list[pl.DataFrame], counters: pl.DataFrame, *, unknown_iids: int,
                dropped: int, unknown_clock: int, bad_timestamps: int, packets: int) -> RawTables:
    """The decoded stream as :class:`RawTables`, with a warning per kind of trouble counted."""
    track_rows = [tuple(_text(v) for v in row) for row in tracks.values()]
    track_frame = pl.DataFrame(track_rows, schema=TRACK_SCHEMA, orient="row")
    warnings = []
    if unknown_iids:
        warnings.append(
            f"{unknown_iids} interned references to ids the sequence never defined "
            f"(names shown as {UNKNOWN_NAME!r})"
        )
    if dropped:
        warnings.append(f"the producer reported lost packets {dropped} time(s)")
    if unknown_clock:
        warnings.append(
            f"{unknown_clock} packets use a sequence clock with no clock snapshot; "
            "their timestamps were taken as-is"
        )
    if bad_timestamps:
        warnings.append(f"skipped {bad_timestamps} track events whose timestamp is beyond "
                        "int64 nanoseconds")
    return RawTables(track_frame, pl.concat(events).with_row_index("idx"),
                     pl.concat(annotations), counters, warnings, packets)


_PYTHON_ROW_KEYS = ("correlation", "_dur")  # the walker's key codes 0 and 1


def _bitmap(valid: bytes) -> pa.Buffer:
    """Arrow's validity bitmap from one byte per row."""
    return pa.py_buffer(np.packbits(np.frombuffer(valid, dtype=np.uint8), bitorder="little"))


class _WalkDecoder(AnnotationDecoding):
    """The compiled walker's chunks, as the frames :class:`_Decoder` builds from its lists."""

    def __init__(self) -> None:
        self._init_annotations()
        self.walker = _perfettowalk.Walker(RAW_CODES)
        # interned annotation names and strings: the walker fills these dicts as it goes
        self.ann_names = self.walker.ann_names
        self.ann_strings = self.walker.ann_strings
        self.ev_parts: list[pl.DataFrame] = []
        self.python_parts: list[pl.DataFrame] = []
        self.ct_parts: list[pl.DataFrame] = []
        self._slow_rows: list[tuple[int, str, int | None, str | None]] = []

    def _annotation(self, idx: int, key: str, int_value: int | None, str_value: str | None) -> None:
        self._slow_rows.append((idx, key, int_value, str_value))

    def feed(self, buf: bytes) -> int:
        """Walk the complete packets at the start of ``buf``: where they end, or -1 (declined)."""
        end = self.walker.feed(buf)
        if end < 0:
            return end
        cols = self.walker.take()
        n = cols["events"]

        def text(prefix: str) -> pa.Array:
            return pa.LargeStringArray.from_buffers(
                n, pa.py_buffer(cols[prefix + "_off"]), pa.py_buffer(cols[prefix + "_data"]),
                _bitmap(cols[prefix + "_valid"]))

        events = pa.table({
            "ts": np.frombuffer(cols["ev_ts"], dtype=np.int64),
            "type": np.frombuffer(cols["ev_type"], dtype=np.int8),
            "track": np.frombuffer(cols["ev_track"], dtype=np.uint64),
            "name": text("name"),
            "category": text("cat"),
            "flow": pa.Array.from_buffers(pa.uint64(), n, [_bitmap(cols["ev_flow_valid"]),
                                                          pa.py_buffer(cols["ev_flow"])]),
        })
        frame = pl.from_arrow(events)
        assert isinstance(frame, pl.DataFrame)
        self.ev_parts.append(frame.cast(EVENT_SCHEMA))  # type: ignore[arg-type]
        if cols["py_idx"]:
            keys = np.frombuffer(cols["py_key"], dtype=np.uint8)
            self.python_parts.append(pl.DataFrame({
                "idx": pl.Series(np.frombuffer(cols["py_idx"], dtype=np.uint32)),
                "key": pl.Series(_PYTHON_ROW_KEYS, dtype=pl.String).gather(keys),
                "int_value": pl.Series(np.frombuffer(cols["py_int"], dtype=np.int64)),
                "str_value": pl.Series(dtype=pl.String).extend_constant(None, keys.size),
            }))
        if cols["ct_track"]:
            self.ct_parts.append(pl.DataFrame({
                "track": np.frombuffer(cols["ct_track"], dtype=np.uint64),
                "ts": np.frombuffer(cols["ct_ts"], dtype=np.int64),
                "value": np.frombuffer(cols["ct_value"], dtype=np.float64),
            }))
        self._annotations(cols)
        if self._slow_rows:  # after the chunk's own rows, as the reference appends them
            columns = dict(zip(ANNOTATION_SCHEMA, map(list, zip(*self._slow_rows, strict=True)),
                               strict=True))
            self._slow_rows = []
            self.python_parts.append(_rows(columns, ANNOTATION_SCHEMA))
        return end

    def _annotations(self, cols: dict[str, Any]) -> None:
        """The walker's debug annotations: typed as the reference types them, and the slow ones
        (nested values, dicts, arrays, malformed) decoded one by one by the reference's code."""
        buf = np.frombuffer(cols["blob_data"], dtype=np.uint8)
        slow = [np.frombuffer(cols[k], dtype=np.int64)
                for k in ("sl_start", "sl_end", "sl_owner", "sl_gen")]
        for start, end, owner, gen in zip(*slow, strict=True):
            self._slow_annotation(buf[start:end].tobytes(), int(owner), int(gen))
        if not cols["an_idx"]:
            return
        value = np.frombuffer(cols["an_value"], dtype=np.uint64)
        frame = pl.DataFrame({
            "idx": np.frombuffer(cols["an_idx"], dtype=np.uint32),
            "key": pl.Series(KEY_NAMES).gather(np.frombuffer(cols["an_code"], dtype=np.int64)),
            "gen": np.frombuffer(cols["an_gen"], dtype=np.int64),
            "field": np.frombuffer(cols["an_field"], dtype=np.int64),
            "value": value,
            "double": value.view(np.float64),
            "dstart": np.frombuffer(cols["an_dstart"], dtype=np.int64),
            "dlen": np.frombuffer(cols["an_dlen"], dtype=np.int64),
        })
        self.an_parts.append(self._typed_values(frame, buf))

    def tables(self) -> RawTables:
        w = self.walker
        empty_rows = pl.DataFrame(schema=ANNOTATION_SCHEMA)
        counters = pl.concat([pl.DataFrame(schema=COUNTER_SCHEMA), *self.ct_parts])
        return _raw_tables(w.tracks, self.ev_parts or [pl.DataFrame(schema=EVENT_SCHEMA)],
                           [empty_rows, *self.python_parts, *self.an_parts], counters,
                           unknown_iids=self.unknown_iids + w.unknown_iids, dropped=w.dropped,
                           unknown_clock=w.unknown_clock, bad_timestamps=w.bad_timestamps,
                           packets=w.packets)


#: Bytes read from the file per step; a packet larger than this grows the buffer. Measured on a
#: 50 MB trace, 2 MiB chunks were both faster and lighter than 8 MiB ones (335 vs 488 MB peak).
CHUNK_BYTES = 2 << 20


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode a varint at ``pos``; return (value, next position) or (-1, pos) if cut short."""
    result = 0
    shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")
    return -1, pos


def _complete_prefix(buf: bytes, start: int, limit: int = -1) -> tuple[int, int]:
    """Walk packet records from ``start``; return (end of the last complete record, records)."""
    end = len(buf)
    pos = start
    count = 0
    while pos < end and count != limit:
        tag = buf[pos]
        if tag == 0x0A:  # field 1 (packet), length-delimited: by far the common case
            length, body = _varint(buf, pos + 1, end)
            if length < 0 or body + length > end:
                break
            pos = body + length
        else:
            key, after = _varint(buf, pos, end)
            if key < 0:
                break
            wire = key & 7
            if key >> 3 == 0 or wire in (3, 4, 6, 7):
                raise DecodeError(f"byte {pos} is not a protobuf field (tag {tag:#04x})")
            if wire == 0:
                _, nxt = _varint(buf, after, end)
                if nxt == after or buf[nxt - 1] & 0x80:
                    break
            elif wire == 1:
                nxt = after + 8
            elif wire == 5:
                nxt = after + 4
            else:
                length, body = _varint(buf, after, end)
                if length < 0:
                    break
                nxt = body + length
            if nxt > end:
                break
            pos = nxt
        count += 1
    return pos, count


def _chunks(fh: IO[bytes], chunk_bytes: int, warnings: list[str]) -> Iterator[bytes]:
    # Read in pieces of at most 1 MiB so that a cut-off gzip member loses only its last piece.
    piece = min(chunk_bytes, 1 << 20)
    read = getattr(fh, "read1", fh.read)  # read1: one decompression step at a time for gzip
    while True:
        parts: list[bytes] = []
        size = 0
        try:
            while size < chunk_bytes:
                data = read(piece)
                if not data:
                    break
                parts.append(data)
                size += len(data)
        except EOFError:
            warnings.append("the gzip stream ends early (the file is truncated)")
            if parts:
                yield b"".join(parts)
            return
        if not parts:
            return
        yield b"".join(parts) if len(parts) > 1 else parts[0]


def _feed_each(decoder: _Decoder, buf: bytes) -> int:
    """Decode ``buf`` record by record, skipping records that fail; return how many failed."""
    bad = 0
    pos = 0
    end = len(buf)
    while pos < end:
        nxt, _ = _complete_prefix_one(buf, pos)
        try:
            decoder.feed(buf[pos:nxt])
        except Exception:  # noqa: BLE001 - one corrupt packet must not stop the read
            bad += 1
        pos = nxt
    return bad


def _complete_prefix_one(buf: bytes, pos: int) -> tuple[int, int]:
    return _complete_prefix(buf, pos, limit=1)


def decode_stream(fh: IO[bytes], chunk_bytes: int | None = None,
                  walker: bool | None = None) -> RawTables:
    """Decode every complete packet of ``fh``. A cut-off tail becomes a warning.

    The compiled walker reads the stream when it is built (``walker=None``) and the stream can
    be read again; a stream it declines is read again from the start by the Python decoder.
    ``walker=False`` uses only the Python decoder (the reference), ``walker=True`` only the
    walker (None where it declines; tests use this).

    Raises :class:`DecodeError` if the stream does not start as a packet stream.
    """
    if walker is not False and WALKER_AVAILABLE and (walker or fh.seekable()):
        start = fh.tell() if walker is None else 0
        tables = _walk_stream(fh, chunk_bytes or CHUNK_BYTES)
        if tables is not None or walker:
            return tables  # type: ignore[return-value]
        fh.seek(start)
    return _decode_reference(fh, chunk_bytes)


def _walk_stream(fh: IO[bytes], chunk_bytes: int) -> RawTables | None:
    """The walker's tables, or None where it declines (or reads no packet: the reference then
    tells why)."""
    decoder = _WalkDecoder()
    pending = b""
    total = 0
    warnings: list[str] = []
    for data in _chunks(fh, chunk_bytes, warnings):
        total += len(data)
        buf = pending + data if pending else data
        try:
            end = decoder.feed(buf)
        except Exception:  # noqa: BLE001 - e.g. an annotation's text that is not UTF-8
            return None  # the reference skips the packets at fault and says so
        if end < 0:
            return None
        pending = buf[end:]
    if decoder.walker.packets == 0:
        return None
    if pending:
        warnings.append(_truncated(pending))
    tables = decoder.tables()
    tables.warnings = warnings + tables.warnings
    tables.bytes_read = total
    tables.decoder = "walker"
    return tables


def _truncated(pending: bytes) -> str:
    return (f"the trace is truncated: the last {len(pending)} bytes are an incomplete packet "
            "(complete packets before it were kept)")


def _decode_reference(fh: IO[bytes], chunk_bytes: int | None = None) -> RawTables:
    decoder = _Decoder()
    pending = b""
    total = 0
    warnings: list[str] = []
    for data in _chunks(fh, chunk_bytes or CHUNK_BYTES, warnings):
        total += len(data)
        buf = pending + data if pending else data
        try:
            end, count = _complete_prefix(buf, 0)
        except DecodeError as exc:
            if decoder.packets == 0 and not pending:
                raise
            warnings.append(f"stopped at undecodable bytes after {total - len(buf)} bytes: {exc}")
            pending = b""
            break
        if end:
            try:
                decoder.feed(buf[:end])
            except Exception:  # protobuf's DecodeError; its class differs by backend
                # Keep the good packets of this chunk: decode its records one by one.
                bad = _feed_each(decoder, buf[:end])
                if decoder.packets == 0:
                    raise DecodeError("not a Perfetto packet stream") from None
                warnings.append(f"skipped {bad} corrupt packet(s)")
        pending = buf[end:]
    if pending:
        warnings.append(_truncated(pending))
    tables = decoder.tables()
    tables.warnings = warnings + tables.warnings
    tables.bytes_read = total
    return tables
