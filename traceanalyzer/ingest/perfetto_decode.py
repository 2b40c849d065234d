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
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import polars as pl

#: Placeholder for an interned id that the sequence never defined.
UNKNOWN_NAME = "<unknown>"

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

#: Debug annotation names we read, mapped to the column they feed. Producers spell the same thing
#: differently: rocprofv3 writes ``corr_id``/``queue``/``copy_bytes``, Kineto-style producers write
#: ``correlation``/``External id``/``stream``; our own writer writes canonical column names.
ANNOTATION_KEYS: dict[str, str] = {
    "correlation": "correlation",
    "corr_id": "correlation",
    "correlation_id": "correlation",
    "External id": "external_id",
    "external_id": "external_id",
    "device": "device",
    "device_id": "device",
    "agent": "agent",
    "stream": "stream",
    "stream_id": "stream",
    "queue": "queue",
    "grid": "grid",
    "block": "block",
    "grid_x": "grid_x",
    "grid_y": "grid_y",
    "grid_z": "grid_z",
    "block_x": "block_x",
    "block_y": "block_y",
    "block_z": "block_z",
    "registers per thread": "registers",
    "registers": "registers",
    "shared memory": "shared_mem",
    "shared_mem": "shared_mem",
    "bytes": "bytes",
    "copy_bytes": "bytes",
    "copy_kind": "copy_kind",
    "src_kind": "src_kind",
    "dst_kind": "dst_kind",
    "graph_launched": "graph_launched",
    "Input Dims": "input_dims",
    "input_dims": "input_dims",
    "Input type": "input_types",
    "input_types": "input_types",
    "call_stack": "call_stack",
    "parent_op": "parent_op",
    "cuda_sync_kind": "sync_type",
    "sync_type": "sync_type",
    "group_segment_size": "shared_mem",
    "rank": "rank",
    "world_size": "world_size",
    "kind": "kind_arg",
    "domain": "domain",
}


class DecodeError(Exception):
    """The bytes are not a Perfetto packet stream (raised before any packet was read)."""


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


@dataclass
class _Sequence:
    """Incremental state of one ``trusted_packet_sequence_id``."""

    names: dict[int, str] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)
    annotation_names: dict[int, str] = field(default_factory=dict)
    annotation_strings: dict[int, str] = field(default_factory=dict)
    default_track: int = 0
    default_counter_tracks: list[int] = field(default_factory=list)
    clock_id: int = 0
    # sequence-scoped clocks: id -> [is_incremental, unit_ns, current_value, global_base, local_base]
    clocks: dict[int, list[Any]] = field(default_factory=dict)

    def clear(self) -> None:
        self.names.clear()
        self.categories.clear()
        self.annotation_names.clear()
        self.annotation_strings.clear()
        self.default_track = 0
        self.default_counter_tracks = []
        self.clock_id = 0
        self.clocks.clear()


class _Decoder:
    def __init__(self) -> None:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

        self._trace_cls = Trace
        self.seqs: dict[int, _Sequence] = {}
        # events
        self.ev_ts: list[int] = []
        self.ev_type: list[int] = []
        self.ev_track: list[int] = []
        self.ev_name: list[str | None] = []
        self.ev_cat: list[str | None] = []
        self.ev_flow: list[int | None] = []
        # debug annotations, long format
        self.an_idx: list[int] = []
        self.an_key: list[str] = []
        self.an_int: list[int | None] = []
        self.an_str: list[str | None] = []
        # counters
        self.ct_track: list[int] = []
        self.ct_ts: list[int] = []
        self.ct_value: list[float] = []
        self.tracks: dict[int, tuple[Any, ...]] = {}
        self.unknown_iids = 0
        self.dropped = 0
        self.unknown_clock = 0
        self.packets = 0

    # -- packets -----------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Decode a buffer holding only complete packet records."""
        trace = self._trace_cls.FromString(data)
        self._packets(trace.packet)

    def _packets(self, packets: Any) -> None:
        seqs = self.seqs
        for pkt in packets:
            self.packets += 1
            seq_id = pkt.trusted_packet_sequence_id
            seq = seqs.get(seq_id)
            if seq is None:
                seq = seqs[seq_id] = _Sequence()
            if pkt.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED or pkt.incremental_state_cleared:
                seq.clear()
            if pkt.previous_packet_dropped:
                self.dropped += 1
            if pkt.HasField("interned_data"):
                self._intern(seq, pkt.interned_data)
            if pkt.HasField("trace_packet_defaults"):
                self._defaults(seq, pkt.trace_packet_defaults)
            which = pkt.WhichOneof("data")
            if which == "track_event":
                self._track_event(seq, pkt)
            elif which == "track_descriptor":
                self._track_descriptor(pkt.track_descriptor)
            elif which == "clock_snapshot":
                self._clock_snapshot(seq, pkt.clock_snapshot)
            elif which == "compressed_packets":
                try:
                    inner = self._trace_cls.FromString(zlib.decompress(pkt.compressed_packets))
                except Exception:  # noqa: BLE001 - a corrupt blob is a warning, not a crash
                    self.dropped += 1
                else:
                    self._packets(inner.packet)

    def _intern(self, seq: _Sequence, data: Any) -> None:
        for entry in data.event_names:
            seq.names[entry.iid] = entry.name
        for entry in data.event_categories:
            seq.categories[entry.iid] = entry.name
        for entry in data.debug_annotation_names:
            seq.annotation_names[entry.iid] = entry.name
        for entry in data.debug_annotation_string_values:
            seq.annotation_strings[entry.iid] = entry.str.decode("utf-8", "replace")

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

    def _track_event(self, seq: _Sequence, pkt: Any) -> None:
        te = pkt.track_event
        ts = self._timestamp(seq, pkt)
        etype = te.type
        track = te.track_uuid or seq.default_track
        if etype == TYPE_SLICE_END:
            self.ev_ts.append(ts)
            self.ev_type.append(etype)
            self.ev_track.append(track)
            self.ev_name.append(None)
            self.ev_cat.append(None)
            self.ev_flow.append(None)
            return
        if etype == TYPE_COUNTER:
            value = (
                te.double_counter_value
                if te.WhichOneof("counter_value_field") == "double_counter_value"
                else float(te.counter_value)
            )
            self.ct_track.append(track)
            self.ct_ts.append(ts)
            self.ct_value.append(value)
            return
        extra_values = te.extra_counter_values or te.extra_double_counter_values
        if extra_values:
            self._extra_counters(seq, te, ts)
        if etype == 0:
            if not te.HasField("legacy_event"):
                return
            legacy = te.legacy_event
            phase = legacy.phase
            if phase == 88:  # 'X': complete event
                etype = TYPE_COMPLETE
            elif phase == 66:  # 'B'
                etype = TYPE_SLICE_BEGIN
            elif phase == 69:  # 'E'
                etype = TYPE_SLICE_END
            else:
                return
        idx = len(self.ev_ts)
        iid = te.name_iid
        if iid:
            name = seq.names.get(iid)
            if name is None:
                self.unknown_iids += 1
                name = UNKNOWN_NAME
        else:
            name = te.name
        cat = None
        cat_iids = te.category_iids
        if cat_iids:
            cat = seq.categories.get(cat_iids[0])
            if cat is None:
                self.unknown_iids += 1
                cat = UNKNOWN_NAME
        elif te.categories:
            cat = te.categories[0]
        flows = te.flow_ids or te.terminating_flow_ids or te.flow_ids_old
        self.ev_ts.append(ts)
        self.ev_type.append(etype)
        self.ev_track.append(track)
        self.ev_name.append(name)
        self.ev_cat.append(cat)
        self.ev_flow.append(flows[0] if flows else None)
        if etype == TYPE_COMPLETE:
            self._annotation(idx, "_dur", te.legacy_event.duration_us * 1000, None)
        if te.WhichOneof("correlation_id_field") == "correlation_id":
            self._annotation(idx, "correlation", te.correlation_id, None)
        if te.debug_annotations:
            self._debug_annotations(seq, idx, te.debug_annotations)

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

    def _debug_annotations(self, seq: _Sequence, idx: int, annotations: Any) -> None:
        for ann in annotations:
            iid = ann.name_iid
            if iid:
                raw = seq.annotation_names.get(iid)
                if raw is None:
                    self.unknown_iids += 1
                    continue
            else:
                raw = ann.name
            key = ANNOTATION_KEYS.get(raw)
            if key is None:
                continue
            which = ann.WhichOneof("value")
            if which == "int_value":
                self._annotation(idx, key, ann.int_value, None)
            elif which == "uint_value":
                value = ann.uint_value
                self._annotation(idx, key, value if value < 1 << 63 else None, str(value))
            elif which == "bool_value":
                self._annotation(idx, key, int(ann.bool_value), None)
            elif which == "string_value":
                self._annotation(idx, key, None, ann.string_value)
            elif which == "string_value_iid":
                text = seq.annotation_strings.get(ann.string_value_iid)
                if text is None:
                    self.unknown_iids += 1
                    text = UNKNOWN_NAME
                self._annotation(idx, key, None, text)
            elif which == "double_value":
                value = ann.double_value
                self._annotation(idx, key, int(value) if value.is_integer() else None, repr(value))
            elif which == "legacy_json_value":
                self._annotation(idx, key, None, ann.legacy_json_value)
            elif ann.array_values:
                ints = [a.int_value or a.uint_value for a in ann.array_values]
                self._annotation(idx, key, None, "[" + ", ".join(map(str, ints)) + "]")

    # -- result ------------------------------------------------------------------------------

    def tables(self) -> RawTables:
        track_rows = list(self.tracks.values())
        tracks = pl.DataFrame(
            track_rows,
            schema={
                "uuid": pl.UInt64,
                "parent_uuid": pl.UInt64,
                "name": pl.String,
                "pid": pl.Int64,
                "tid": pl.Int64,
                "process_name": pl.String,
                "thread_name": pl.String,
                "is_counter": pl.Boolean,
            },
            orient="row",
        )
        events = pl.DataFrame(
            {
                "ts": pl.Series(self.ev_ts, dtype=pl.Int64),
                "type": pl.Series(self.ev_type, dtype=pl.Int8),
                "track": pl.Series(self.ev_track, dtype=pl.UInt64),
                "name": pl.Series(self.ev_name, dtype=pl.String),
                "category": pl.Series(self.ev_cat, dtype=pl.String),
                "flow": pl.Series(self.ev_flow, dtype=pl.UInt64),
            }
        ).with_row_index("idx")
        annotations = pl.DataFrame(
            {
                "idx": pl.Series(self.an_idx, dtype=pl.UInt32),
                "key": pl.Series(self.an_key, dtype=pl.String),
                "int_value": pl.Series(self.an_int, dtype=pl.Int64),
                "str_value": pl.Series(self.an_str, dtype=pl.String),
            }
        )
        counters = pl.DataFrame(
            {
                "track": pl.Series(self.ct_track, dtype=pl.UInt64),
                "ts": pl.Series(self.ct_ts, dtype=pl.Int64),
                "value": pl.Series(self.ct_value, dtype=pl.Float64),
            }
        )
        warnings = []
        if self.unknown_iids:
            warnings.append(
                f"{self.unknown_iids} interned references to ids the sequence never defined "
                f"(names shown as {UNKNOWN_NAME!r})"
            )
        if self.dropped:
            warnings.append(f"the producer reported lost packets {self.dropped} time(s)")
        if self.unknown_clock:
            warnings.append(
                f"{self.unknown_clock} packets use a sequence clock with no clock snapshot; "
                "their timestamps were taken as-is"
            )
        return RawTables(tracks, events, annotations, counters, warnings, self.packets)


#: Bytes read from the file per step; a packet larger than this grows the buffer.
CHUNK_BYTES = 8 << 20


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


def decode_stream(fh: IO[bytes], chunk_bytes: int = CHUNK_BYTES) -> RawTables:
    """Decode every complete packet of ``fh``. A cut-off tail becomes a warning.

    Raises :class:`DecodeError` if the stream does not start as a packet stream.
    """
    decoder = _Decoder()
    pending = b""
    total = 0
    warnings: list[str] = []
    for data in _chunks(fh, chunk_bytes, warnings):
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
        warnings.append(
            f"the trace is truncated: the last {len(pending)} bytes are an incomplete packet "
            "(complete packets before it were kept)"
        )
    tables = decoder.tables()
    tables.warnings = warnings + tables.warnings
    tables.bytes_read = total
    return tables
