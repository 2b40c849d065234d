"""SQLite page reader (``_sqlitescan.c``): integer columns of a table b-tree, read from the file.

Python side: :mod:`traceanalyzer.ingest.nsys.sqlite_pages`.
"""

from collections.abc import Sequence
from typing import Any, final

def leaf_count(path: str, root: int, /) -> int:
    """The leaf pages of the table b-tree at page ``root`` (only its interior pages are read).
    ValueError where the file cannot be read so."""

def scan(path: str, root: int, positions: tuple[int, ...], letters: bytes, alias: int,
         part: int = 0, parts: int = 1, /) -> tuple[int, Sequence[Any]]:
    """(rows, ((values, bitmap), ...)): the integer columns at record ``positions`` of the
    table whose b-tree starts at page ``root``, int64 or int32 as ``letters`` says (b"l", b"i";
    an integer beyond int32 is missing there), of the ``part``-th of ``parts`` equal runs of its
    leaves; ``alias`` is the index among them of the rowid alias (INTEGER PRIMARY KEY), or -1.
    ValueError where the file cannot be read so."""

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
