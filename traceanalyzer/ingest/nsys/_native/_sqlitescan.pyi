"""SQLite page reader (``_sqlitescan.c``): integer columns of a table b-tree, read from the file.

Python side: :mod:`traceanalyzer.ingest.nsys.sqlite_pages`.
"""

from collections.abc import Sequence
from typing import Any, final

from typing_extensions import Buffer

def leaves(path: str, root: int, /) -> tuple[int, bytes]:
    """(counter, pages): the file change counter and the leaf pages (uint32 page numbers, left
    to right) of the table b-tree at page ``root``; only its interior pages are read.
    ValueError where the file cannot be read so."""

def scan(path: str, counter: int, pages: Buffer, positions: tuple[int, ...], letters: bytes,
         alias: int, /) -> tuple[int, Sequence[Any]]:
    """(rows, ((values, bitmap), ...)): the integer columns at record ``positions`` of the
    leaves ``pages`` (a run of what :func:`leaves` gave, while the file's change counter is
    still ``counter``), int64 or int32 as ``letters`` says (b"l", b"i"; an integer beyond int32
    is missing there); ``alias`` is the index among them of the rowid alias (INTEGER PRIMARY
    KEY), or -1. ValueError where the file cannot be read so."""

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
