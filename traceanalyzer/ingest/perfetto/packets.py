"""The Python packet decoder: the reference the compiled walker must equal.

It reads each packet through the protobuf classes of :mod:`.light` (only the fields we read),
keeps per-sequence incremental state (interned names, default tracks, sequence clocks), and
collects columns in Python lists that become frames once per chunk. It reads every stream the
walker declines.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.ingest.perfetto.annotations import UNKNOWN_NAME, AnnotationDecoding
from traceanalyzer.ingest.perfetto.light import light_classes
from traceanalyzer.ingest.perfetto.tables import (
    ANNOTATION_SCHEMA,
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    TYPE_COMPLETE,
    TYPE_COUNTER,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    RawTables,
    decoded_tables,
    rows_frame,
)

SEQ_INCREMENTAL_STATE_CLEARED = 1
#: Clock ids 64..127 are scoped to one packet sequence (ClockSnapshot docs).
_SEQUENCE_CLOCK_MIN = 64
_SEQUENCE_CLOCK_MAX = 127
_BOOTTIME = 6
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


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


class PacketDecoder(AnnotationDecoding):
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
        self.ev_parts.append(rows_frame({"ts": self.ev_ts, "type": self.ev_type, "track": self.ev_track,
                                    "name": self.ev_name, "category": self.ev_cat,
                                    "flow": self.ev_flow}, EVENT_SCHEMA))
        self.ev_base += len(self.ev_ts)
        self.ev_ts, self.ev_type, self.ev_track = [], [], []
        self.ev_name, self.ev_cat, self.ev_flow = [], [], []

    def tables(self) -> RawTables:
        self.flush_annotations()
        self._flush_events()
        python_rows = rows_frame({"idx": self.an_idx, "key": self.an_key, "int_value": self.an_int,
                             "str_value": self.an_str}, ANNOTATION_SCHEMA)
        counters = rows_frame({"track": self.ct_track, "ts": self.ct_ts, "value": self.ct_value},
                         COUNTER_SCHEMA)
        return decoded_tables(self.tracks, self.ev_parts, [python_rows, *self.an_parts], counters,
                           unknown_iids=self.unknown_iids, dropped=self.dropped,
                           unknown_clock=self.unknown_clock, bad_timestamps=self.bad_timestamps,
                           packets=self.packets)
