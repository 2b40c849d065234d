"""The compiled packet walker (``_native/_perfettowalk.c``), when it is built.

It reads packets into column buffers with no Python object per packet; :class:`WalkDecoder`
turns each chunk's buffers into the frames :class:`~.packets.PacketDecoder` builds from its lists,
and decodes the annotations the walker leaves to Python with the reference's own code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from traceanalyzer.ingest.perfetto.annotations import (
    KEY_KINDS,
    KEY_NAMES,
    RAW_CODES,
    AnnotationDecoding,
)
from traceanalyzer.ingest.perfetto.tables import (
    ANNOTATION_SCHEMA,
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    INT_VALUE_SCHEMA,
    PAIR_SCHEMA,
    STR_VALUE_SCHEMA,
    RawTables,
    decoded_tables,
    rows_frame,
)

try:
    from traceanalyzer.ingest.perfetto._native import _perfettowalk
except ImportError:  # pragma: no cover - depends on how the package was installed
    _perfettowalk = None  # type: ignore[assignment]

WALKER_AVAILABLE = _perfettowalk is not None

_PYTHON_ROW_KEYS = ("correlation", "_dur")  # the walker's key codes 0 and 1


def _bitmap(valid: bytes) -> pa.Buffer:
    """Arrow's validity bitmap from one byte per row."""
    return pa.py_buffer(np.packbits(np.frombuffer(valid, dtype=np.uint8), bitorder="little"))


class WalkDecoder(AnnotationDecoding):
    """The compiled walker's chunks, as the frames :class:`PacketDecoder` builds from its lists."""

    def __init__(self) -> None:
        self._init_annotations()
        self.walker = _perfettowalk.Walker(RAW_CODES, KEY_KINDS)
        # interned annotation names and strings: the walker fills these dicts as it goes
        self.ann_names = self.walker.ann_names
        self.ann_strings = self.walker.ann_strings
        self.ev_parts: list[pl.DataFrame] = []
        self.python_parts: list[pl.DataFrame] = []
        self.ct_parts: list[pl.DataFrame] = []
        self.int_parts: list[pl.DataFrame] = []
        self.str_parts: list[pl.DataFrame] = []
        self.pair_parts: list[pl.DataFrame] = []
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
        if cols["pr_begin"]:
            self.pair_parts.append(pl.DataFrame({
                "begin": np.frombuffer(cols["pr_begin"], dtype=np.int64),
                "end_ns": np.frombuffer(cols["pr_end"], dtype=np.int64),
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
            self.python_parts.append(rows_frame(columns, ANNOTATION_SCHEMA))
        return end

    def _annotations(self, cols: dict[str, Any]) -> None:
        """The walker's debug annotations: the values it typed itself; the rest typed as the
        reference types them, and the slow ones (nested values, dicts, arrays, malformed)
        decoded one by one by the reference's code."""
        if cols["vi_idx"]:
            n = len(cols["vi_code"])
            self.int_parts.append(pl.DataFrame({
                "idx": np.frombuffer(cols["vi_idx"], dtype=np.uint32),
                "code": np.frombuffer(cols["vi_code"], dtype=np.uint8),
                "value": pl.from_arrow(pa.Array.from_buffers(
                    pa.int64(), n, [_bitmap(cols["vi_valid"]), pa.py_buffer(cols["vi_value"])])),
            }))
        if cols["vs_idx"]:
            n = len(cols["vs_code"])
            self.str_parts.append(pl.DataFrame({
                "idx": np.frombuffer(cols["vs_idx"], dtype=np.uint32),
                "code": np.frombuffer(cols["vs_code"], dtype=np.uint8),
                "value": pl.from_arrow(pa.LargeStringArray.from_buffers(
                    n, pa.py_buffer(cols["vs_off"]), pa.py_buffer(cols["vs_data"]))),
            }))
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
        # rows that are not their key's first for the event are typed only to count what they
        # name that the sequence never defined, as the reference counts it
        first = pl.Series(np.frombuffer(cols["an_first"], dtype=np.bool_))
        self.an_parts.append(self._typed_values(frame, buf).filter(first))

    def tables(self) -> RawTables:
        w = self.walker
        empty_rows = pl.DataFrame(schema=ANNOTATION_SCHEMA)
        counters = pl.concat([pl.DataFrame(schema=COUNTER_SCHEMA), *self.ct_parts])
        tables = decoded_tables(w.tracks, self.ev_parts or [pl.DataFrame(schema=EVENT_SCHEMA)],
                           [empty_rows, *self.python_parts, *self.an_parts], counters,
                           unknown_iids=self.unknown_iids + w.unknown_iids, dropped=w.dropped,
                           unknown_clock=w.unknown_clock, bad_timestamps=w.bad_timestamps,
                           packets=w.packets)
        def parts(schema: dict[str, Any], frames: list[pl.DataFrame]) -> pl.DataFrame:
            return pl.concat([pl.DataFrame(schema=schema), *frames], rechunk=False)

        tables.int_values = parts(INT_VALUE_SCHEMA, self.int_parts)
        tables.str_values = parts(STR_VALUE_SCHEMA, self.str_parts)
        if w.paired:
            tables.slice_pairs = parts(PAIR_SCHEMA, self.pair_parts)
            tables.unended, tables.orphan_ends = w.unended, w.orphan_ends
        return tables
