"""Kineto event decoder (``_eventdecode.c``): trace events straight into typed columns.

Python side: :mod:`traceanalyzer.ingest.kineto.decode` (``DecodeArgs`` names the arguments).
"""

from collections.abc import Sequence

from typing_extensions import Buffer

#: (key, kind): a field to read, ``kind`` a ``column_codes.ColumnKind``.
_Field = tuple[bytes, int]
#: A column's buffers: text (views, data, valid), numbers (values, valid); valid: a byte per row.
_Column = tuple[Buffer, ...]

def decode(
    chunk: Buffer,
    top_fields: Sequence[_Field],
    args_key: bytes,
    arg_fields: Sequence[_Field],
    keep_index: int = -1,
    keep_values: tuple[bytes, ...] | None = None,
    arena_bytes: int = 0,
    text_chars: int = 0,
    /,
) -> tuple[int, Buffer, list[_Column], list[_Column]] | None:
    """(rows, args_valid, top columns, arg columns) of the events in ``chunk``, or None where
    the decoder is not sure to read them as Polars' NDJSON reader would."""
