"""Reduce a decoded chunk to the canonical frames' rows with the compiled pass
(``_eventreduce.c``), when it is built.

``kineto._reduce`` (Polars) is the reference: this gives its frames for a chunk the C decoder
read, or None, and the caller then uses the reference. It runs on the decoding thread, right
after the chunk is decoded, so the reduction of a small trace no longer waits for the last chunk,
and it copies only the rows and columns the frames take (and little text: most text columns
share the decoder's buffers).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from traceanalyzer.ingest.eventdecode import Raw

try:
    from traceanalyzer.ingest import _eventreduce
except ImportError:  # pragma: no cover - depends on how the package was installed
    _eventreduce = None

AVAILABLE = _eventreduce is not None
# The type of each output column, by its letter in _eventreduce.c's LAYOUT.
_TYPES = {"t": pa.string_view(), "l": pa.int64(), "i": pa.int32()}
_EMPTY = pa.py_buffer(b"")


def reduce(raw: Raw) -> tuple[int, int, list[list[pa.Array]]] | None:
    """(untimed, negative, tables) for a chunk of ``kineto.EVENT_SCHEMA`` events, or None.

    ``tables`` are the cpu, gpu, annotation, sync and memory rows, each a list of Arrow arrays
    in the column order of ``_eventreduce.c``'s LAYOUT (``kineto`` names and types them).
    """
    if _eventreduce is None:
        return None
    out = _eventreduce.reduce(raw.rows, raw.struct_valid, raw.top, raw.inner)
    if out is None:
        return None
    untimed, negative, tables = out
    return untimed, negative, [[_array(rows, letter, col) for letter, col in zip(layout, cols, strict=True)]
                                for rows, layout, cols in tables]


def _array(rows: int, letter: str, col: tuple[Any, ...]) -> pa.Array:
    values, bitmap, *data = col
    buffers = [pa.py_buffer(bitmap), pa.py_buffer(values)]
    if data:  # text: its views point into one data buffer (none for short literals)
        buffers.append(_EMPTY if data[0] is None else pa.py_buffer(data[0]))
    return pa.Array.from_buffers(_TYPES[letter], rows, buffers)
