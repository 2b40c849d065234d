"""The raw tables a Perfetto stream decodes into, shared by both decoders and trace_processor.

They are deliberately close to the wire: tracks as described, one row per TrackEvent (begin,
end, instant, complete), counter samples, and a long table of the debug annotations we
recognise. :mod:`traceanalyzer.ingest.perfetto.map` turns them into canonical frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.ingest.perfetto.annotations import UNKNOWN_NAME
from traceanalyzer.model import DType

#: Internal event type for legacy complete events (phase 'X' with a duration).
TYPE_COMPLETE = 9
TYPE_SLICE_BEGIN = 1
TYPE_SLICE_END = 2
TYPE_INSTANT = 3
TYPE_COUNTER = 4


def as_text(value: Any) -> Any:
    """Strings from the trace as ``str``: protobuf hands back ``bytes`` for invalid UTF-8."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _string_series(values: list[Any]) -> pl.Series:
    try:
        return pl.Series(values, dtype=pl.String)
    except (TypeError, ValueError, pl.exceptions.PolarsError):
        return pl.Series([as_text(v) for v in values], dtype=pl.String)


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
#: Annotation values the walker typed itself: the key as its code in annotations.KEY_NAMES.
INT_VALUE_SCHEMA = {"idx": pl.UInt32, "code": pl.UInt8, "value": pl.Int64}
STR_VALUE_SCHEMA = {"idx": pl.UInt32, "code": pl.UInt8, "value": pl.String}
PAIR_SCHEMA = {"begin": pl.Int64, "end_ns": pl.Int64}


def rows_frame(columns: dict[str, list[Any]], schema: dict[str, DType]) -> pl.DataFrame:
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
    # The walker's typed values (INT_VALUE_SCHEMA, STR_VALUE_SCHEMA): the first value of a key
    # for an event, where ``annotations`` has no row of that key for the event (a row there wins).
    int_values: pl.DataFrame | None = None
    str_values: pl.DataFrame | None = None
    # The slices the walker paired as their events came (begin: the begin's row in ``events``,
    # in no order; end_ns), begins never ended and ends with no begin; None: map.py pairs them.
    slice_pairs: pl.DataFrame | None = None
    unended: int = 0
    orphan_ends: int = 0


def decoded_tables(tracks: dict[int, tuple[Any, ...]], events: list[pl.DataFrame],
                annotations: list[pl.DataFrame], counters: pl.DataFrame, *, unknown_iids: int,
                dropped: int, unknown_clock: int, bad_timestamps: int, packets: int) -> RawTables:
    """The decoded stream as :class:`RawTables`, with a warning per kind of trouble counted."""
    track_rows = [tuple(as_text(v) for v in row) for row in tracks.values()]
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
    # not rechunked: the chunks and a copy of them all would be alive at once
    return RawTables(track_frame, pl.concat(events, rechunk=False).with_row_index("idx"),
                     pl.concat(annotations, rechunk=False), counters, warnings, packets)
