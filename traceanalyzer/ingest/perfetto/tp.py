"""Ingest through Perfetto's trace_processor, when the user has a ``trace_processor_shell``.

trace_processor understands every Perfetto data source (ftrace, Android GPU render stages,
Chrome's JSON importer, ...), so it covers traces the native reader does not. The ``perfetto``
package downloads the binary when no ``bin_path`` is given; that fails offline and is not wanted
on locked-down clusters, so this module only ever runs with a binary the user named.

Its slice, track, args and counter tables are shaped into the native reader's raw tables, and
:func:`traceanalyzer.ingest.perfetto.map.to_trace` maps them the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.perfetto.annotations import ANNOTATION_KEYS
from traceanalyzer.ingest.perfetto.tables import (
    ANNOTATION_SCHEMA,
    COUNTER_SCHEMA,
    EVENT_SCHEMA,
    TRACK_SCHEMA,
    TYPE_COMPLETE,
    RawTables,
)
from traceanalyzer.model import DType, Trace, TraceMeta

TRACKS_SQL = """
SELECT t.id AS uuid, t.parent_id AS parent_uuid, t.name AS name,
       COALESCE(tp.pid, pp.pid) AS pid, th.tid AS tid,
       COALESCE(tp.name, pp.name) AS process_name, th.name AS thread_name,
       ct.id IS NOT NULL AS is_counter
FROM track t
LEFT JOIN thread_track tt ON tt.id = t.id
LEFT JOIN thread th ON th.utid = tt.utid
LEFT JOIN process tp ON tp.upid = th.upid
LEFT JOIN process_track pt ON pt.id = t.id
LEFT JOIN process pp ON pp.upid = pt.upid
LEFT JOIN counter_track ct ON ct.id = t.id
"""

# dur = -1 marks a slice that never ended; trace_processor keeps it, we drop it (with a warning).
SLICES_SQL = """
SELECT s.id AS idx, s.ts AS ts, s.dur AS dur, s.track_id AS track, s.name AS name,
       s.category AS category,
       (SELECT MIN(f.id) FROM flow f WHERE f.slice_out = s.id OR f.slice_in = s.id) AS flow
FROM slice s
"""

# Debug annotations are "debug.<name>"; the JSON importer's args are "args.<name>".
ARGS_SQL = """
SELECT s.id AS idx, a.key AS key, a.int_value AS int_value, a.string_value AS str_value,
       a.real_value AS real_value
FROM slice s JOIN args a ON a.arg_set_id = s.arg_set_id
WHERE a.key GLOB 'debug.*' OR a.key GLOB 'args.*'
"""

COUNTERS_SQL = "SELECT c.track_id AS track, c.ts AS ts, c.value AS value FROM counter c"


def _trace_processor(trace: str, bin_path: str) -> Any:
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    return TraceProcessor(trace=trace, config=TraceProcessorConfig(bin_path=bin_path))


def read_with_trace_processor(
    path: str | os.PathLike[str],
    bin_path: str | os.PathLike[str] | None,
    *,
    factory: Callable[[str, str], Any] | None = None,
) -> Trace:
    """Read ``path`` through the ``trace_processor_shell`` at ``bin_path``.

    Refuses (``InputError``) without an executable ``bin_path``: the ``perfetto`` package would
    otherwise download one. ``factory`` builds the TraceProcessor (tests pass a stand-in).
    """
    if not bin_path:
        raise InputError(path, "trace_processor needs a binary: pass --trace-processor PATH "
                               "(nothing is ever downloaded)")
    binary = Path(bin_path)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise InputError(binary, "is not an executable trace_processor_shell")
    source = Path(path)
    if not source.is_file():
        raise InputError(source, "no such file")
    try:
        tp = (factory or _trace_processor)(str(source), str(binary))
    except Exception as exc:  # the package raises its own exception types
        raise InputError(source, f"trace_processor could not load it ({exc})") from None
    try:
        tables = {
            name: tp.query(sql).as_polars_dataframe()
            for name, sql in (
                ("tracks", TRACKS_SQL),
                ("slices", SLICES_SQL),
                ("args", ARGS_SQL),
                ("counters", COUNTERS_SQL),
            )
        }
    except Exception as exc:  # noqa: BLE001 - a query error is the binary's, reported in one line
        raise InputError(source, f"trace_processor query failed ({exc})") from None
    finally:
        tp.close()
    meta = TraceMeta(path=str(source), source_format="perfetto")
    meta.extra["trace_processor"] = str(binary)
    raw = raw_tables(tables, meta.warnings)
    from traceanalyzer.ingest.perfetto.map import to_trace

    return to_trace(raw, meta)


def raw_tables(tables: dict[str, pl.DataFrame], warnings: list[str]) -> RawTables:
    """Shape trace_processor's query results like the native decoder's tables."""
    tracks = _cast(tables["tracks"], TRACK_SCHEMA)
    slices = tables["slices"]
    unfinished = slices.filter(pl.col("dur") < 0).height
    if unfinished:
        warnings.append(f"{unfinished} slices began but never ended (dropped)")
    slices = slices.filter(pl.col("dur") >= 0)
    events = _cast(
        slices.with_columns(type=pl.lit(TYPE_COMPLETE)),
        {"idx": pl.UInt32, **EVENT_SCHEMA},
    )
    args = tables["args"].with_columns(
        key=pl.col("key")
        .str.replace(r"^(?:debug|args)\.", "")
        .replace_strict(ANNOTATION_KEYS, default=None),
        int_value=pl.coalesce(
            pl.col("int_value").cast(pl.Int64, strict=False),
            pl.when(pl.col("real_value").round() == pl.col("real_value")).then(
                pl.col("real_value").cast(pl.Int64, strict=False)
            ),
        ),
        str_value=pl.coalesce(
            pl.col("str_value").cast(pl.String), pl.col("real_value").cast(pl.String)
        ),
    ).filter(pl.col("key").is_not_null())
    durations = slices.select(
        idx=pl.col("idx"), key=pl.lit("_dur"), int_value=pl.col("dur"),
        str_value=pl.lit(None, pl.String),
    )
    annotations = pl.concat([_cast(args, ANNOTATION_SCHEMA), _cast(durations, ANNOTATION_SCHEMA)])
    counters = _cast(tables["counters"], COUNTER_SCHEMA)
    return RawTables(tracks, events, annotations, counters, [], 0)


def _cast(frame: pl.DataFrame, schema: dict[str, DType]) -> pl.DataFrame:
    return frame.select(
        [
            (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t, strict=False).alias(c)
            for c, t in schema.items()
        ]
    )
