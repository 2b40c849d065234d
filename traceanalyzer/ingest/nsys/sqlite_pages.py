"""Integer columns of a SQLite table read from the file's pages (``_native/_sqlitescan.c``).

SQLite's engine costs ~80 ns a value here, through connectorx or its own C API alike; the
runtime and kernel tables of a 1 GB export hold ~190 M values. The pages of a plain rowid table
are read directly instead, about 3x faster (bench/NOTES.md, "nsys pages"). Where a table is not
such a table, or the file is not as SQLite writes it, :func:`read_pages` declines (None) and
the caller reads the table through SQLite, which gives any error its own words.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.cpus import usable_cpus
from traceanalyzer.model import DType

try:
    from traceanalyzer.ingest.nsys._native import _sqlitescan
except ImportError:  # not built (no C compiler at install): SQLite reads every table
    _sqlitescan = None  # type: ignore[assignment]

AVAILABLE = _sqlitescan is not None
#: The scanner's limit on the record positions it reads.
MAX_POSITION = 63
#: A table is read in up to this many runs of leaves side by side, each of this many leaves at
#: least (a 4 KB leaf holds ~60 rows of the runtime table).
MAX_PARTS, LEAVES_PER_PART = 4, 512


def read_pages(con: sqlite3.Connection, path: Path, table: str,
               schema: Mapping[str, DType]) -> pl.DataFrame | None:
    """``schema``'s columns of ``table`` (Int64 or Int32, where a value beyond Int32 is read as
    missing; names as ``PRAGMA table_info`` gives them), or None where the pages cannot be read
    directly."""
    letters = b"".join(b"l" if t == pl.Int64 else b"i" if t == pl.Int32 else b"?"
                       for t in schema.values())
    if _sqlitescan is None or not schema or b"?" in letters:
        return None
    found = con.execute(
        "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if not found or not isinstance(found[0], int):
        return None
    root = found[0]
    # (cid, name, type, notnull, default, pk, hidden) per column, in the record's order.
    info = con.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
    by_name = {row[1]: row for row in info}
    wanted = [by_name.get(name) for name in schema]
    if (any(row is None or row[0] > MAX_POSITION or row[4] is not None for row in wanted)
            or any(row[6] for row in info)):
        # A default stands in for a column that older rows lack, and generated (hidden)
        # columns are not in the record as the table lists them: SQLite knows best.
        return None
    alias = _rowid_alias(con, table, info, wanted)
    positions = tuple(row[0] for row in wanted if row is not None)
    file = str(path)
    try:
        # The leaves listed once, then read in equal runs side by side: the scan's time is
        # mostly its fresh memory, which each thread faults in for itself.
        counter, pages = _sqlitescan.leaves(file, root)
        leaves = memoryview(pages).cast("I")
        parts = max(1, min(usable_cpus(), MAX_PARTS, len(leaves) // LEAVES_PER_PART))
        shares = [leaves[len(leaves) * i // parts:len(leaves) * (i + 1) // parts]
                  for i in range(parts)]

        def scan(share: memoryview) -> tuple[int, Any]:
            return _sqlitescan.scan(file, counter, share, positions, letters, alias)

        if parts == 1:
            batches = [scan(shares[0])]
        else:
            with ThreadPoolExecutor(parts - 1, thread_name_prefix="nsys-pages") as pool:
                rest = [pool.submit(scan, share) for share in shares[1:]]
                batches = [scan(shares[0])] + [f.result() for f in rest]
    except (ValueError, OSError):
        return None
    names = tuple(schema)
    table_ = _sqlitescan.Batches(letters, names, batches)
    return pl.DataFrame([pl.Series(values=table_.column(i)) for i in range(len(names))])


def _rowid_alias(con: sqlite3.Connection, table: str, info: list[tuple[Any, ...]],
                 wanted: list[tuple[Any, ...] | None]) -> int:
    """The index among ``wanted`` of the table's rowid alias (its record value is NULL, its
    value the rowid), or -1. The alias is a lone INTEGER PRIMARY KEY that SQLite keeps no index
    for: INTEGER PRIMARY KEY DESC (SQLite's quirk) and WITHOUT ROWID tables index theirs, and
    their key's value is in the record."""
    keys = [row for row in info if row[5]]
    if len(keys) != 1 or str(keys[0][2]).upper() != "INTEGER":
        return -1
    # (seq, name, unique, origin, partial) per index: origin "pk" is the primary key's own.
    if any(row[3] == "pk" for row in con.execute(f'PRAGMA index_list("{table}")')):
        return -1
    return next((i for i, row in enumerate(wanted) if row is keys[0]), -1)
