"""Read SQLite tables into Polars frames column-wise, with the column types given by the caller.

Types are never inferred from values: a column whose first rows are NULL must still come out
as Int64. Three engines, tried in this order per table:

- ``pages`` (compiled at install, :mod:`traceanalyzer.ingest.nsys.sqlite_pages`): the integer
  columns of a plain rowid table read from the file's pages, without SQLite's engine; about 3x
  faster than connectorx. It declines text columns, SQL conditions and files it does not read
  as SQLite writes them, and the next engine reads those.
- ``connectorx`` (optional extra, ``pip install traceanalyzer[fast]``): Rust, Arrow output,
  no Python object per row. Large tables are split into rowid ranges that connectorx reads on
  parallel threads. It takes column types from the declared SQL types, so NULL-first columns
  are fine; a column without a declared type makes it fail, and we fall back.
- ``sqlite3`` (standard library): rows fetched in batches and handed to Polars with an explicit
  schema. About 8x slower, but always there.

``TRACEANALYZER_SQLITE_ENGINE`` names the first engine to try (``sqlite3`` forces the fallback,
``connectorx`` skips the pages; used by tests and the benchmark).
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path

import polars as pl

from traceanalyzer.cpus import usable_cpus
from traceanalyzer.ingest.nsys import sqlite_pages
from traceanalyzer.model import DType

#: Rows per parallel connectorx query; smaller tables are read in one query. Small enough that
#: the 10^5-row tables of 10-300 MB exports are split too, instead of read on one core while the
#: other waits (bench/NOTES.md, nsys round 5).
PARTITION_ROWS = 40_000
#: Rows per sqlite3 fetchmany batch in the fallback.
FALLBACK_BATCH = 100_000
#: How long to wait for a writer's lock before calling the database locked.
LOCK_TIMEOUT_S = 2.0


def engine() -> str:
    """The engine that will be tried first: "pages" when compiled, else "connectorx" when
    installed, else "sqlite3"; ``TRACEANALYZER_SQLITE_ENGINE`` can start later in that order."""
    asked = os.environ.get("TRACEANALYZER_SQLITE_ENGINE", "").lower()
    if asked == "sqlite3":
        return "sqlite3"
    if asked != "connectorx" and sqlite_pages.AVAILABLE:
        return "pages"
    return "connectorx" if has_connectorx() else "sqlite3"


def has_connectorx() -> bool:
    try:
        import connectorx  # noqa: F401
    except ImportError:
        return False
    return True


def connect_readonly(path: Path) -> sqlite3.Connection:
    """Open ``path`` read-only (never creates or modifies the file)."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    con = sqlite3.connect(uri, uri=True, timeout=LOCK_TIMEOUT_S, check_same_thread=False)
    # Trace strings are untrusted: undecodable bytes become U+FFFD instead of an exception.
    con.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return con


def read_table(
    con: sqlite3.Connection,
    path: Path,
    table: str,
    columns: Mapping[str, DType],
    where: str = "",
    exprs: Mapping[str, str] | None = None,
) -> pl.DataFrame | None:
    """Read ``columns`` of ``table`` (identifiers already checked to exist) with the given types
    (an integer beyond an Int32 column's range is read as missing there).

    ``where`` is a trusted SQL condition written by the caller (never from the trace).

    ``exprs`` computes some columns in SQL instead (trusted SQL, by output column name), to read
    fewer columns. Such a column has no declared type, so connectorx takes its type from the
    first row and fails on a NULL or mixed types: with ``exprs``, only connectorx is tried,
    and None means the caller should read plain columns instead.
    """
    exprs = exprs or {}
    select = ", ".join(exprs.get(c, f'"{c}"') for c in columns)
    query = f'SELECT {select} FROM "{table}"' + (f" WHERE {where}" if where else "")
    schema = pl.Schema(dict(columns))
    first = engine()
    if first == "pages" and not where and not exprs:
        frame = sqlite_pages.read_pages(con, path, table, schema)
        if frame is not None:
            return frame
    # SQLite's engines read Int32 columns as Int64, narrowed here (beyond Int32: missing).
    wide = pl.Schema({c: pl.Int64() if t == pl.Int32 else t for c, t in schema.items()})
    frame = None
    if first != "sqlite3" and has_connectorx():
        frame = _read_connectorx(con, path, table, select, where, wide)
    if frame is None:
        if exprs:  # computed columns: connectorx's only (see above)
            return None
        frame = _read_sqlite3(con, query, wide)
    return frame.cast(dict(schema), strict=False) if wide != schema else frame


def _read_sqlite3(con: sqlite3.Connection, query: str, schema: pl.Schema) -> pl.DataFrame:
    cur = con.execute(query)
    parts = []
    while rows := cur.fetchmany(FALLBACK_BATCH):
        try:
            parts.append(pl.DataFrame(rows, schema=schema, orient="row", strict=False))
        except pl.exceptions.PolarsError:
            # SQLite lets any column hold any type: a blob or text in an INTEGER column (a
            # corrupt export) becomes null. Rare, so a Python pass over this batch only.
            parts.append(pl.DataFrame(_coerce_rows(rows, schema), schema=schema, orient="row",
                                      strict=False))
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat(parts, rechunk=False)


def _coerce_rows(rows: list[tuple], schema: pl.Schema) -> list[tuple]:
    """Each value kept only if it has the Python type its column's dtype takes, else None."""
    def fits(dtype: pl.DataType) -> Callable[[object], bool]:
        if dtype.is_integer():
            return lambda v: isinstance(v, int) and -(2**63) <= v < 2**63
        if dtype.is_float():
            return lambda v: isinstance(v, (int, float)) and -(2.0**1023) < v < 2.0**1023
        if dtype == pl.String:
            return lambda v: isinstance(v, str)
        return lambda v: not isinstance(v, bytes)

    checks = [fits(dtype) for dtype in schema.dtypes()]
    return [tuple(v if ok(v) else None for v, ok in zip(row, checks, strict=True)) for row in rows]


def _read_connectorx(
    con: sqlite3.Connection,
    path: Path,
    table: str,
    select: str,
    where: str,
    schema: pl.Schema,
) -> pl.DataFrame | None:
    import connectorx as cx

    try:
        # Two subqueries: SQLite answers a lone min() or max() of the rowid from the b-tree's
        # ends, but min() and max() in one SELECT scan the whole table (bench/NOTES.md).
        lo, hi = con.execute(
            f'SELECT (SELECT min(rowid) FROM "{table}"), (SELECT max(rowid) FROM "{table}")'
        ).fetchone()
    except sqlite3.OperationalError:  # a view, or a WITHOUT ROWID table: no ranges to split
        return None
    if lo is None:
        return pl.DataFrame(schema=schema)
    base = f'SELECT {select} FROM "{table}" WHERE ' + (f"({where}) AND " if where else "")
    parts = max(1, min(usable_cpus(), 8, (hi - lo + 1) // PARTITION_ROWS))
    step = (hi - lo) // parts + 1
    queries = [
        f"{base}rowid >= {lo + i * step} AND rowid < {lo + (i + 1) * step}" for i in range(parts)
    ]
    uri = "sqlite://" + urllib.parse.quote(str(path.resolve()))
    try:
        table_ = cx.read_sql(uri, queries if parts > 1 else queries[0], return_type="arrow")
    except Exception:  # noqa: BLE001 - any connectorx failure: the sqlite3 path decides
        return None
    frame = pl.from_arrow(table_)
    assert isinstance(frame, pl.DataFrame)
    if frame.width != len(schema):
        return None
    return frame.rename(dict(zip(frame.columns, schema.names(), strict=True))).cast(
        dict(schema), strict=False
    )
