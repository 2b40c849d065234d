"""Compiled reduction of a decoded Kineto chunk (``_eventreduce.c``) and the Arrow C streams of
its columns (``_arrowstream.h``).

Python side: :mod:`traceanalyzer.ingest.kineto.reduce`.
"""

from collections.abc import Sequence
from typing import Any, final

from typing_extensions import Buffer

#: (rows, layout, columns): a text column is (views, bitmap, data), a number column
#: (values, bitmap); a column may be None in the input of ``Batches`` (all null).
_Table = tuple[int, str, tuple[Any, ...]]

def reduce(
    rows: int, args_valid: Buffer, top: tuple[tuple[Buffer, ...], ...],
    args: tuple[tuple[Buffer, ...], ...], /,
) -> tuple[int, int, tuple[_Table, _Table, _Table, _Table, _Table]] | None:
    """(untimed, negative, (cpu, gpu, annotations, syncs, memory)) of a decoded chunk of
    ``EVENT_SCHEMA`` events, or None (the chunk goes through Polars)."""

@final
class Batches:
    """A table's columns, a batch per chunk; ``column(i)`` is column i for the Arrow C stream
    interface."""

    def __new__(cls, formats: bytes, names: tuple[str, ...],
                batches: list[tuple[int, Sequence[Any]]]) -> Batches: ...
    def column(self, i: int, /) -> Batches:
        """The batches of column ``i``, whose ``__arrow_c_stream__`` gives an array per batch."""
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """A column's batches as an Arrow C stream (a PyCapsule)."""
