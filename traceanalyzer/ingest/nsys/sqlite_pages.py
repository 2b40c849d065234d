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
        "SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if not found or not isinstance(found[0], int):
        return None
    root, sql = found
    # (cid, name, type, notnull, default, pk, hidden) per column, in the record's order.
    info = con.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
    by_name = {row[1]: row for row in info}
    wanted = [by_name.get(name) for name in schema]
    if (any(row is None or row[0] > MAX_POSITION or row[4] is not None for row in wanted)
            or any(row[6] for row in info)):
        # A default stands in for a column that older rows lack, and generated (hidden)
        # columns are not in the record as the table lists them: SQLite knows best.
        return None
    keys = [row for row in info if row[5]]
    text = str(sql or "").upper()
    alias = -1
    if (len(keys) == 1 and str(keys[0][2]).upper() == "INTEGER" and "DESC" not in text
            and "WITHOUT ROWID" not in text):
        # INTEGER PRIMARY KEY is the rowid itself (but for the DESC quirk): its record value
        # is NULL.
        alias = next((i for i, row in enumerate(wanted) if row is keys[0]), -1)
    positions = tuple(row[0] for row in wanted if row is not None)
    file = str(path)
    try:
        # Equal runs of leaves side by side: the scan's time is mostly its fresh memory, which
        # each thread faults in for itself.
        parts = max(1, min(usable_cpus(), MAX_PARTS,
                           _sqlitescan.leaf_count(file, root) // LEAVES_PER_PART))
        if parts == 1:
            batches = [_sqlitescan.scan(file, root, positions, letters, alias)]
        else:
            with ThreadPoolExecutor(parts - 1, thread_name_prefix="nsys-pages") as pool:
                rest = [pool.submit(_sqlitescan.scan, file, root, positions, letters, alias, i,
                                    parts) for i in range(1, parts)]
                batches = [_sqlitescan.scan(file, root, positions, letters, alias, 0, parts)]
                batches += [f.result() for f in rest]
    except (ValueError, OSError):
        return None
    names = tuple(schema)
    table_ = _sqlitescan.Batches(letters, names, batches)
    return pl.DataFrame([pl.Series(values=table_.column(i)) for i in range(len(names))])
