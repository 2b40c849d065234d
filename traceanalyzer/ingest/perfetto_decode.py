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

import numpy as np
import polars as pl

from traceanalyzer.ingest import perfetto_wire as wire

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


_LIGHT: dict[str, Any] = {}

#: Fields of TracePacket and TrackEvent the reader looks at. Everything else is skipped by the C
#: parser without ever becoming a Python object.
_PACKET_FIELDS = (
    "timestamp", "timestamp_clock_id", "track_event", "track_descriptor", "clock_snapshot",
    "trusted_packet_sequence_id", "interned_data", "sequence_flags", "incremental_state_cleared",
    "trace_packet_defaults", "previous_packet_dropped", "compressed_packets",
)
_EVENT_FIELDS = (
    "category_iids", "categories", "name_iid", "name", "type", "track_uuid", "counter_value",
    "double_counter_value", "extra_counter_track_uuids", "extra_counter_values",
    "extra_double_counter_track_uuids", "extra_double_counter_values", "flow_ids_old", "flow_ids",
    "terminating_flow_ids_old", "terminating_flow_ids", "correlation_id", "debug_annotations",
    "legacy_event",
)


def _light_classes() -> tuple[Any, Any]:
    """``Trace``/``TracePacket`` look-alikes that keep only the fields we read.

    They are built from the ``perfetto`` package's own descriptors, with two changes: fields we do
    not read are left out (the parser skips them in C), and ``debug_annotations`` is declared as
    ``bytes`` so that annotations stay raw for :mod:`traceanalyzer.ingest.perfetto_wire`.
    """
    if not _LIGHT:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as real

        source = descriptor_pb2.FileDescriptorProto()
        real.DESCRIPTOR.CopyToProto(source)
        messages = {m.name: m for m in source.message_type}
        light = descriptor_pb2.FileDescriptorProto(
            name="traceanalyzer/perfetto_light.proto",
            package="traceanalyzer.perfetto_light",
            dependency=[real.DESCRIPTOR.name],
        )
        for name, keep in (("TracePacket", _PACKET_FIELDS), ("TrackEvent", _EVENT_FIELDS)):
            msg = light.message_type.add(name=name)
            for f in messages[name].field:
                if f.name not in keep:
                    continue
                copy = msg.field.add()
                copy.CopyFrom(f)
                copy.ClearField("oneof_index")
                copy.ClearField("json_name")
                if f.name == "debug_annotations":
                    copy.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                    copy.ClearField("type_name")
                elif f.name == "type":
                    copy.type = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
                    copy.ClearField("type_name")
                elif f.name == "track_event":
                    copy.type_name = ".traceanalyzer.perfetto_light.TrackEvent"
        trace = light.message_type.add(name="Trace")
        trace.field.add(
            name="packet",
            number=1,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
            type_name=".traceanalyzer.perfetto_light.TracePacket",
        )
        pool = descriptor_pool.Default()
        try:
            fd = pool.FindFileByName(light.name)
        except KeyError:
            fd = pool.Add(light)
            fd = pool.FindFileByName(light.name)
        _LIGHT["trace"] = message_factory.GetMessageClass(fd.message_types_by_name["Trace"])
        _LIGHT["annotation"] = real.DebugAnnotation
    return _LIGHT["trace"], _LIGHT["annotation"]


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


class _Decoder:
    def __init__(self) -> None:
        self._trace_cls, self._annotation_cls = _light_classes()
        self.seqs: dict[int, _Sequence] = {}
        self._gens = 0
        # events
        self.ev_ts: list[int] = []
        self.ev_type: list[int] = []
        self.ev_track: list[int] = []
        self.ev_name: list[str | None] = []
        self.ev_cat: list[str | None] = []
        self.ev_flow: list[int | None] = []
        # raw debug annotations of the current chunk, and which event and sequence state own them
        self.blobs: list[bytes] = []
        self.blob_event: list[int] = []
        self.blob_gen: list[int] = []
        self.blob_count: list[int] = []
        # interned annotation names and string values, by (generation, iid)
        self.ann_names: dict[int, dict[int, str]] = {}
        self.ann_strings: dict[int, dict[int, str]] = {}
        # debug annotations, long format: Python-built rows plus per-chunk decoded frames
        self.an_idx: list[int] = []
        self.an_key: list[str] = []
        self.an_int: list[int | None] = []
        self.an_str: list[str | None] = []
        self.an_parts: list[pl.DataFrame] = []
        # counters
        self.ct_track: list[int] = []
        self.ct_ts: list[int] = []
        self.ct_value: list[float] = []
        self.tracks: dict[int, tuple[Any, ...]] = {}
        self.unknown_iids = 0
        self.dropped = 0
        self.unknown_clock = 0
        self.packets = 0

    def _new_gen(self) -> int:
        self._gens += 1
        return self._gens

    # -- packets -----------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Decode a buffer holding only complete packet records."""
        trace = self._trace_cls.FromString(data)
        self._packets(trace.packet)
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
        count = 0
        for pkt in packets:
            count += 1
            seq_id = pkt.trusted_packet_sequence_id
            if seq_id != last_seq_id:
                seq = seqs.get(seq_id)
                if seq is None:
                    seq = seqs[seq_id] = _Sequence(self._new_gen())
                last_seq_id = seq_id
            flags = pkt.sequence_flags
            if flags & SEQ_INCREMENTAL_STATE_CLEARED or pkt.incremental_state_cleared:
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
            if pkt.timestamp_clock_id or seq.clock_id:
                ts = self._timestamp(seq, pkt)
            etype = te.type
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
            idx = len(self.ev_ts)
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
            if te.HasField("correlation_id"):
                self._annotation(idx, "correlation", te.correlation_id, None)
            if etype == TYPE_COMPLETE:
                self._annotation(idx, "_dur", te.legacy_event.duration_us * 1000, None)
        self.packets += count

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

    # -- debug annotations, a chunk at a time ------------------------------------------------

    def flush_annotations(self) -> None:
        if not self.blobs:
            return
        counts = np.asarray(self.blob_count, dtype=np.int64)
        owner = np.repeat(np.asarray(self.blob_event, dtype=np.int64), counts)
        gen = np.repeat(np.asarray(self.blob_gen, dtype=np.int64), counts)
        blobs = self.blobs
        self.blobs, self.blob_event, self.blob_gen, self.blob_count = [], [], [], []
        buf, starts, ends = wire.concat(blobs)
        n = starts.size
        # Most annotations start with their interned name id (field 1, varint: tag 0x08). Look
        # that up first and skip the annotations nobody reads before decoding anything else.
        first = (buf[starts] == 0x08) & (ends > starts)
        first_iid = np.zeros(n, dtype=np.uint64)
        at = np.nonzero(first)[0]
        iid_value, iid_len = wire.varints(buf, starts[at] + 1)
        first[at[iid_len < 0]] = False
        first_iid[at] = np.where(iid_len > 0, iid_value, 0)
        code, unknown = self._key_codes(gen, first_iid)
        self.unknown_iids += int((unknown & first).sum())
        sub = np.nonzero(~(first & (code < 0)))[0]
        fields, sub_bad = wire.scan(buf, starts[sub], ends[sub], max_fields=8)
        msg, fno, value = sub[fields["msg"]], fields["field"], fields["value"]
        bad = np.zeros(n, dtype=bool)
        bad[sub] = sub_bad
        # Arrays, dicts and nested values are rare: decode those annotations one by one.
        slow = bad.copy()
        slow[msg[np.isin(fno, (8, 11, 12))]] = True
        for i in np.nonzero(slow)[0]:
            self._slow_annotation(blobs[i], int(owner[i]), int(gen[i]))

        # Name of each annotation: an interned id (field 1) or a string (field 10).
        rows = np.arange(msg.size)
        iid = np.zeros(n, dtype=np.uint64)
        sel = fno == 1
        iid[msg[sel]] = value[sel]
        text_row = np.full(n, -1, dtype=np.int64)
        sel = fno == 10
        text_row[msg[sel]] = rows[sel]
        # First value field of each annotation (assigning in reverse makes the first one win).
        value_row = np.full(n, -1, dtype=np.int64)
        sel = np.nonzero(np.isin(fno, _VALUE_FIELDS))[0][::-1]
        value_row[msg[sel]] = sel

        key_code, unknown = self._key_codes(gen, iid)
        self.unknown_iids += int((unknown & ~slow & ~first).sum())
        named = np.nonzero(text_row >= 0)[0]
        if named.size:
            texts = wire.strings(buf, fields["dstart"][text_row[named]],
                                 fields["dlen"][text_row[named]])
            codes = texts.replace_strict(_RAW_CODE, default=-1, return_dtype=pl.Int64)
            key_code[named] = np.where(iid[named] == 0, codes.to_numpy(), key_code[named])
        use = np.nonzero((key_code >= 0) & (value_row >= 0) & ~slow)[0]
        if use.size == 0:
            return
        vrow = value_row[use]
        frame = pl.DataFrame(
            {
                "idx": owner[use].astype(np.uint32),
                "key": pl.Series(_KEY_NAMES).gather(key_code[use]),
                "gen": gen[use],
                "field": fno[vrow],
                "value": value[vrow],
                "double": value[vrow].view(np.float64),
                "dstart": fields["dstart"][vrow],
                "dlen": fields["dlen"][vrow],
            }
        )
        self.an_parts.append(self._typed_values(frame, buf))

    def _key_codes(self, gen: np.ndarray, iid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Code (index in _KEY_NAMES, -1 if not read) of each interned annotation name, and
        which ids the sequence never defined."""
        combos = [
            (g << 32 | i, _RAW_CODE.get(name, -1))
            for g, names in self.ann_names.items()
            for i, name in names.items()
        ]
        key_code = np.full(gen.size, -1, dtype=np.int64)
        unknown = iid != 0
        if combos:
            combos.sort()
            known = np.array([c[0] for c in combos], dtype=np.int64)
            codes = np.array([c[1] for c in combos], dtype=np.int64)
            wanted = (gen << 32) | iid.astype(np.int64)
            pos = np.clip(np.searchsorted(known, wanted), 0, known.size - 1)
            found = (known[pos] == wanted) & (iid != 0)
            key_code = np.where(found, codes[pos], -1)
            unknown &= ~found
        return key_code, unknown

    def _typed_values(self, values: pl.DataFrame, buf: np.ndarray) -> pl.DataFrame:
        text_rows = values.with_row_index("row").filter(pl.col("field").is_in((6, 9)))
        texts = text_rows.select("row").with_columns(
            text=wire.strings(buf, text_rows["dstart"].to_numpy(), text_rows["dlen"].to_numpy())
        )
        values = values.with_row_index("row").join(texts, on="row", how="left")
        if (values["field"] == 17).any():
            string_rows = [(g, i, s) for g, d in self.ann_strings.items() for i, s in d.items()]
            interned = pl.DataFrame(
                string_rows,
                schema={"gen": pl.Int64, "value": pl.UInt64, "interned": pl.String},
                orient="row",
            )
            values = values.join(interned, on=["gen", "value"], how="left")
            self.unknown_iids += values.filter(
                (pl.col("field") == 17) & pl.col("interned").is_null()
            ).height
        else:
            values = values.with_columns(interned=pl.lit(None, pl.String))
        field_no = pl.col("field")
        signed = pl.col("value").reinterpret(signed=True)
        double = pl.col("double")
        whole = double.is_finite() & (double.round() == double) & (double.abs() < 2.0**63)
        return values.select(
            idx=pl.col("idx").cast(pl.UInt32),
            key=pl.col("key"),
            int_value=pl.when(field_no.is_in((2, 4, 7)))
            .then(signed)
            .when((field_no == 3) & (pl.col("value") < 2**63))
            .then(signed)
            .when((field_no == 5) & whole)
            .then(double.cast(pl.Int64, strict=False)),
            str_value=pl.when(field_no.is_in((6, 9)))
            .then(pl.col("text"))
            .when(field_no == 17)
            .then(pl.col("interned").fill_null(UNKNOWN_NAME))
            .when(field_no == 3)
            .then(pl.when(pl.col("value") >= 2**63).then(pl.col("value").cast(pl.String)))
            .when(field_no == 5)
            .then(double.cast(pl.String)),
        )

    def _slow_annotation(self, blob: bytes, idx: int, gen: int) -> None:
        try:
            ann = self._annotation_cls.FromString(blob)
        except Exception:  # noqa: BLE001 - one corrupt annotation is skipped, not fatal
            return
        iid = ann.name_iid
        if iid:
            raw = self.ann_names.get(gen, {}).get(iid)
            if raw is None:
                self.unknown_iids += 1
                return
        else:
            raw = ann.name
        key = ANNOTATION_KEYS.get(raw)
        if key is None:
            return
        which = ann.WhichOneof("value")
        if which in ("int_value", "uint_value", "bool_value", "pointer_value"):
            self._annotation(idx, key, int(getattr(ann, which)) & ((1 << 63) - 1), None)
        elif which == "double_value":
            value = ann.double_value
            self._annotation(idx, key, int(value) if value.is_integer() else None, repr(value))
        elif which == "string_value":
            self._annotation(idx, key, None, ann.string_value)
        elif which == "legacy_json_value":
            self._annotation(idx, key, None, ann.legacy_json_value)
        elif which == "string_value_iid":
            text = self.ann_strings.get(gen, {}).get(ann.string_value_iid)
            if text is None:
                self.unknown_iids += 1
                text = UNKNOWN_NAME
            self._annotation(idx, key, None, text)
        elif ann.array_values:
            ints = [a.int_value or a.uint_value for a in ann.array_values]
            self._annotation(idx, key, None, "[" + ", ".join(map(str, ints)) + "]")

    # -- result ------------------------------------------------------------------------------

    def tables(self) -> RawTables:
        self.flush_annotations()
        track_rows = [tuple(_text(v) for v in row) for row in self.tracks.values()]
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
                "name": _string_series(self.ev_name),
                "category": _string_series(self.ev_cat),
                "flow": pl.Series(self.ev_flow, dtype=pl.UInt64),
            }
        ).with_row_index("idx")
        python_rows = pl.DataFrame(
            {
                "idx": pl.Series(self.an_idx, dtype=pl.UInt32),
                "key": pl.Series(self.an_key, dtype=pl.String),
                "int_value": pl.Series(self.an_int, dtype=pl.Int64),
                "str_value": _string_series(self.an_str),
            }
        )
        annotations = pl.concat([python_rows, *self.an_parts])
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


#: DebugAnnotation value fields: bool, uint, int, double, string, pointer, legacy JSON, string iid.
_VALUE_FIELDS = (2, 3, 4, 5, 6, 7, 9, 17)
#: Columns annotations feed, numbered for the vectorised name look-up.
_KEY_NAMES = sorted(set(ANNOTATION_KEYS.values()))
_KEY_CODE = {name: code for code, name in enumerate(_KEY_NAMES)}
#: Raw annotation name -> code of the column it feeds.
_RAW_CODE = {raw: _KEY_CODE[key] for raw, key in ANNOTATION_KEYS.items()}


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
