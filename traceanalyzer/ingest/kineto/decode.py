"""Decode trace events with the compiled decoder (``_native/_eventdecode.c``), when it is built.

The C decoder reads only the fields of an explicit Polars schema, straight into column buffers
that Polars takes over without a copy, at about a fifth of the CPU of Polars' NDJSON reader
(which converts every value of every event).
It promises the frame ``pl.read_ndjson(chunk, schema=schema, ignore_errors=True)`` would give, or
nothing: on anything it is not sure to read the same way it returns None, and the caller uses
Polars. Without a C compiler at install time the module is missing and Polars does everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

from traceanalyzer.ingest.column_codes import KIND_OF, ColumnKind
from traceanalyzer.ingest.textcap import MAX_TEXT_CHARS
from traceanalyzer.model import DType

try:
    from traceanalyzer.ingest.kineto._native import _eventdecode
except ImportError:  # pragma: no cover - depends on how the package was installed
    _eventdecode = None  # type: ignore[assignment]

AVAILABLE = _eventdecode is not None
#: Characters the decoder keeps of a text field: one more than the text cap, so that
#: ``textcap.cap_text`` still sees the field is long, counts it and cuts it as it would have cut
#: the whole text, while a 150 MB name costs 64 KiB instead of its size (several times over).
TEXT_CHARS = MAX_TEXT_CHARS + 1
_ARROW = {ColumnKind.TEXT: pa.string_view(), ColumnKind.INT: pa.int64(),
          ColumnKind.FLOAT: pa.float64()}


class Field(NamedTuple):
    """A field the decoder reads: its key, as bytes, and its kind."""

    key: bytes
    kind: ColumnKind


class Spec(NamedTuple):
    """The decoder's field lists for a schema of text/int/float columns and one struct."""

    top: tuple[Field, ...]
    #: The struct column's key (b"" without one) and its fields.
    struct_key: bytes
    inner: tuple[Field, ...]


class DecodeArgs(NamedTuple):
    """The arguments of ``_eventdecode.decode`` after the chunk, in its order."""

    top: tuple[Field, ...]
    struct_key: bytes
    inner: tuple[Field, ...]
    #: Only events whose text field ``top[keep_index]`` holds one of ``keep_values`` become rows
    #: (-1: every event).
    keep_index: int
    keep_values: tuple[bytes, ...] | None
    #: If not 0, the columns grow in one mapping of that size in huge pages.
    arena_bytes: int
    #: If not 0, each text field keeps at most this many characters (see :data:`TEXT_CHARS`).
    text_chars: int


@cache
def _spec(schema: tuple[tuple[str, DType], ...]) -> Spec:
    top, struct_name, inner = [], None, []
    for name, dtype in schema:
        if isinstance(dtype, pl.Struct):
            if struct_name is not None:
                raise ValueError("one struct column at most")
            struct_name = name
            inner = [Field(f.name.encode(), KIND_OF[f.dtype]) for f in dtype.fields]
        else:
            top.append(Field(name.encode(), KIND_OF[dtype]))
    return Spec(tuple(top), (struct_name or "").encode(), tuple(inner))


def decode(
    chunk: bytes | memoryview, schema: dict[str, DType],
    keep: tuple[str, Sequence[str]] | None = None, arena_bytes: int = 0,
) -> pl.DataFrame | None:
    """Events of a chunk as a frame of ``schema``, or None (use Polars' reader).

    ``keep=(column, values)`` leaves out, before they take any memory, the events whose text
    ``column`` holds none of ``values`` (as ``.filter(pl.col(column).is_in(values))`` would).
    ``arena_bytes``: see :func:`decode_raw`.
    """
    raw = decode_raw(chunk, schema, keep, arena_bytes)
    return None if raw is None else to_frame(raw, schema)


def decode_raw(
    chunk: bytes | memoryview, schema: dict[str, DType],
    keep: tuple[str, Sequence[str]] | None = None, arena_bytes: int = 0,
) -> Raw | None:
    """:func:`decode`'s columns as the decoder leaves them, for :func:`to_frame` or the
    compiled reduction (:func:`.reduce.reduce_raw`), which reads them without a frame in between.

    ``arena_bytes``: grow the columns in one mapping of that size in huge pages (see
    ``_native/_eventdecode.c``), for the first chunks of a read.
    """
    if _eventdecode is None:
        return None
    spec = _spec(tuple(schema.items()))
    keep_index, keep_values = -1, None
    if keep is not None:
        column, values = keep
        keep_index = [f.key for f in spec.top].index(column.encode())
        keep_values = tuple(v.encode() for v in values)
    args = DecodeArgs(*spec, keep_index, keep_values, arena_bytes, TEXT_CHARS)
    try:
        out = _eventdecode.decode(chunk, *args)
    except TypeError:  # a module built before text_chars: the same rows, texts cut later
        out = _eventdecode.decode(chunk, *args[:-1])
    if out is None:
        return None
    rows, struct_valid, top_cols, inner_cols = out
    return Raw(rows, struct_valid, tuple(top_cols), tuple(inner_cols))


class Raw(NamedTuple):
    """A decoded chunk: its row count, the struct column's validity (a byte per row), and the
    buffers of each column in the schema's order (text: views, data, valid; numbers: values,
    valid)."""

    rows: int
    struct_valid: Any
    top: tuple[tuple[Any, ...], ...]
    inner: tuple[tuple[Any, ...], ...]


def to_frame(raw: Raw, schema: dict[str, DType]) -> pl.DataFrame:
    """The decoder's columns as a frame of ``schema``, without a copy."""
    top, _, inner = _spec(tuple(schema.items()))
    top_arrays = iter(_arrays(raw.rows, top, raw.top))
    columns = {}
    for name, dtype in schema.items():
        if isinstance(dtype, pl.Struct):
            children = _arrays(raw.rows, inner, raw.inner)
            struct = pa.struct([pa.field(f.name, a.type) for f, a in zip(dtype.fields, children,
                                                                            strict=True)])
            columns[name] = pa.Array.from_buffers(struct, raw.rows, [_bitmap(raw.struct_valid)],
                                                  children=children)
        else:
            columns[name] = next(top_arrays)
    # string_view, int64, float64 and struct arrive as the schema's String, Int64, Float64 and
    # Struct, without a copy (string views are Polars' own layout for text).
    frame = pl.from_arrow(pa.table(columns))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _bitmap(valid: Any) -> pa.Buffer:
    """Arrow's validity bitmap from the decoder's buffer of one byte per row. (Not a mask through
    StructArray.from_arrays: that imports pyarrow.compute, which a small trace would wait for;
    bench/NOTES.md, round 4.)"""
    return pa.py_buffer(np.packbits(np.frombuffer(valid, dtype=np.uint8), bitorder="little"))


def _arrays(rows: int, fields: tuple[Field, ...],
            cols: tuple[tuple[Any, ...], ...]) -> list[pa.Array]:
    arrays = []
    for (_, kind), col in zip(fields, cols, strict=True):
        *data, valid = col
        arrays.append(pa.Array.from_buffers(_ARROW[kind], rows,
                                            [_bitmap(valid), *map(pa.py_buffer, data)]))
    return arrays
