"""Reduce a decoded chunk to the canonical frames' rows with the compiled pass
(``_eventreduce.c``), when it is built.

``kineto._reduce`` (Polars) is the reference: this gives its frames for a chunk the C decoder
read, or None, and the caller then uses the reference. It runs on the decoding thread, right
after the chunk is decoded, so the reduction of a small trace no longer waits for the last chunk,
and it copies only the rows and columns the frames take (and little text: most text columns
share the decoder's buffers).

The reduced columns reach Polars through the Arrow C stream interface that the same extension
implements (``_arrowstream.h``), a stream per column with an array per chunk, without pyarrow in
between.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from traceanalyzer.ingest.eventdecode import Raw

try:
    from traceanalyzer.ingest import _eventreduce
except ImportError:  # pragma: no cover - depends on how the package was installed
    _eventreduce = None

AVAILABLE = _eventreduce is not None

#: A reduced table: its layout (a letter per column: t text, l int64, i int32) and a batch of
#: columns per chunk, each (rows, columns).
ReducedTable = tuple[str, list[tuple[int, tuple[Any, ...]]]]


def reduce(raw: Raw) -> tuple[int, int, list[ReducedTable]] | None:
    """(untimed, negative, tables) for a chunk of ``kineto.EVENT_SCHEMA`` events, or None.

    ``tables`` are the cpu, gpu, annotation, sync and memory rows, each one batch of columns in
    the column order of ``_eventreduce.c``'s LAYOUT (``kineto`` names and types them).
    """
    if _eventreduce is None:
        return None
    out = _eventreduce.reduce(raw.rows, raw.struct_valid, raw.top, raw.inner)
    if out is None:
        return None
    untimed, negative, tables = out
    return untimed, negative, [(layout, [(rows, cols)]) for rows, layout, cols in tables]


def frame(layout: str, names: Sequence[str],
          batches: list[tuple[int, tuple[Any, ...]]]) -> pl.DataFrame:
    """One frame of the batches, a chunk per batch, their buffers shared, not copied.

    A column of a batch may be None: all null (a column the reduction does not fill).
    """
    assert _eventreduce is not None
    table = _eventreduce.Batches(layout.encode(), tuple(names), batches)
    # A stream per column: each column's buffers are freed as soon as that column is dropped.
    return pl.DataFrame([pl.Series(values=table.column(i)) for i in range(len(names))])
