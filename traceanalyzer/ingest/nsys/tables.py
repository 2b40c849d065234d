"""Nsight Systems exports: the tables we read, their columns, and typed reads of them.

:class:`ExportDb` checks that a table has the columns this version knows (a renamed column in a
newer nsys is an error, not a silent null) and reads them with declared types through
:mod:`traceanalyzer.ingest.nsys.sqlite_columns`; :class:`TableReader` reads tables on a second
thread while the frames of those already read are built.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.bounds import INT32_MAX, INT32_MIN
from traceanalyzer.ingest.heap import release_freed
from traceanalyzer.ingest.nsys.sqlite_columns import connect_readonly, read_table

I64, I32, STR = pl.Int64, pl.Int32, pl.String

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
#: Whole CUDA graph executions, recorded instead of their kernels with --cuda-graph-trace=graph.
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
#: Device allocations and frees, recorded with --cuda-memory-usage=true.
MEMORY_USAGE = "CUDA_GPU_MEMORY_USAGE_EVENTS"

#: Per table: (required columns, optional columns). A table that is present but lacks a required
#: column is an error (a renamed column in an nsys version we do not know); optional ones -> null.
TABLE_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    KERNEL: (
        ("start", "end", "deviceId", "streamId", "correlationId"),
        ("globalPid", "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX",
         "blockY", "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory",
         "graphNodeId"),
    ),
    RUNTIME: (("start", "end", "correlationId", "globalTid", "nameId"), ("eventClass",)),
    DRIVER: (("start", "end", "correlationId", "globalTid", "nameId"), ()),
    MEMCPY: (
        ("start", "end", "deviceId", "streamId", "bytes", "copyKind"),
        ("correlationId", "globalPid", "srcKind", "dstKind", "graphNodeId"),
    ),
    GRAPH: (("start", "end", "deviceId", "streamId", "graphId"), ("correlationId", "globalPid")),
    MEMSET: (
        ("start", "end", "deviceId", "streamId", "bytes"),
        ("correlationId", "globalPid", "memKind", "graphNodeId"),
    ),
    SYNC: (
        ("start", "end"),
        ("deviceId", "streamId", "correlationId", "globalPid", "syncType", "deprecatedSyncType"),
    ),
    NVTX: (("start", "eventType"), ("end", "globalTid", "text", "textId", "domainId")),
    MEMORY_USAGE: (("start", "globalPid", "deviceId", "bytes", "memoryOperationType"),
                   ("address", "memKind", "correlationId")),
    "StringIds": (("id", "value"), ()),
}
#: Of these, at least one must be present.
ONE_OF: dict[str, tuple[str, ...]] = {
    KERNEL: ("demangledName", "shortName"),
    SYNC: ("syncType", "deprecatedSyncType"),
    NVTX: ("text", "textId"),
}
TEXT_COLUMNS = {"text", "value"}
#: Integer columns that the frames hold as Int32 (device ids, launch geometry): read so, a value
#: beyond Int32 as missing, and counted (:attr:`ExportDb.narrowed`).
INT32_COLUMNS = frozenset({"deviceId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                           "registersPerThread"})
#: Integer columns whose values are ids the frames join or group on. SQLite lets any column hold
#: any type, and stores an integer beyond int64 as a REAL: such a value reads as missing, and
#: where one of these columns holds a missing value its values of other types are counted
#: (:attr:`ExportDb.unreadable`), so that the reader can say so.
ID_COLUMNS = frozenset({"correlationId", "streamId", "deviceId", "globalPid", "globalTid",
                        "nameId", "demangledName", "shortName", "graphId", "id"})

NSYS_MARKER_TABLES = ("StringIds", "META_DATA_EXPORT")


def _read_by_us(name: object) -> bool:
    """Whether the reader queries a table of this name (exactly, or in SQLite's case-blind way)."""
    upper = str(name).upper()
    known = {t.upper() for t in (*TABLE_COLUMNS, *NSYS_MARKER_TABLES)}
    return upper in known or upper.startswith(("TARGET_INFO_", "PROCESSES", "META_DATA",
                                               "CUPTI_", "NVTX_", "STRINGIDS"))


class ExportDb:
    """The open export: its table schemas, and typed reads of the columns we use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.con = connect_readonly(path)
            rows = self.con.execute(
                "SELECT name, type, sql FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise InputError(path, sqlite_problem(exc)) from None
        self.tables = {r[0] for r in rows}
        #: "TABLE.column" -> values of an id column that are not integers within int64 (text,
        #: blobs, reals: what SQLite makes of an integer beyond int64), read as missing.
        self.unreadable: dict[str, int] = {}
        #: Integers of :data:`INT32_COLUMNS` beyond Int32, read as missing.
        self.narrowed = 0
        # nsys writes plain tables. A view (a recursive one never ends) or a virtual table in
        # place of a table the reader reads runs arbitrary SQL: refused, not read.
        for name, kind, sql in rows:
            virtual = kind == "table" and str(sql or "").lstrip().upper().startswith(
                "CREATE VIRTUAL")
            if (kind == "view" or virtual) and _read_by_us(name):
                raise InputError(path, f"{name} is a {'view' if kind == 'view' else 'virtual table'}"
                                       ", not a table: not an Nsight Systems export")

    def columns(self, table: str) -> dict[str, str]:
        info = self.con.execute(f'PRAGMA table_info("{table}")').fetchall()
        return {r[1]: (r[2] or "").upper() for r in info}

    def read(self, table: str, where: str = "") -> pl.DataFrame | None:
        """The table's known columns with declared types; None when the table is absent."""
        if table not in self.tables:
            return None
        required, optional = TABLE_COLUMNS[table]
        have = self.columns(table)
        missing = [c for c in required if c not in have]
        one_of = ONE_OF.get(table, ())
        if one_of and not any(c in have for c in one_of):
            missing.append(" or ".join(one_of))
        if missing:
            raise InputError(
                self.path,
                f"table {table} lacks column(s) {', '.join(missing)}: not an Nsight Systems "
                "export this version of traceanalyzer knows",
            )
        wanted = {c: (STR if c in TEXT_COLUMNS else I32 if c in INT32_COLUMNS else I64)
                  for c in (*required, *optional) if c in have}
        if table == KERNEL and "demangledName" in have:
            wanted.pop("shortName", None)  # only a fallback for exports without demangled names
        frame = None
        if table == NVTX and {"text", "textId"} <= have.keys() and "StringIds" in self.tables:
            # Registered strings looked up in SQL: one column less to read (millions of rows),
            # and the text of an id is that of the id's StringIds row in any case.
            frame = read_table(
                self.con, self.path, table, {c: t for c, t in wanted.items() if c != "textId"},
                where, exprs={"text": 'ifnull("text", (SELECT value FROM StringIds '
                                      'WHERE id = "textId"))'},
            )
            if frame is not None:
                frame = frame.with_columns(textId=pl.lit(None, I64))
        if frame is None:
            frame = read_table(self.con, self.path, table, wanted, where)
        assert frame is not None
        self._count_unreadable(table, frame, where)
        absent = {c: pl.lit(None, I64) for c in optional if c not in have}
        return frame.with_columns(**absent) if absent else frame

    def _count_unreadable(self, table: str, frame: pl.DataFrame, where: str) -> None:
        """Count the values read as missing that were not: in :attr:`unreadable`, those of
        ``table``'s id columns that are not integers within int64; in :attr:`narrowed`, the
        integers of Int32 columns beyond Int32. Only columns holding a missing value are
        counted, in one query: nsys writes none there, so a real export costs no query."""
        ids = [c for c in frame.columns if c in ID_COLUMNS and frame.schema[c] in (I64, I32)
               and frame[c].null_count()]
        narrow = [c for c in frame.columns if frame.schema[c] == I32 and frame[c].null_count()]
        if not ids and not narrow:
            return
        sums = [f"sum(\"{c}\" IS NOT NULL AND typeof(\"{c}\") != 'integer')" for c in ids] + [
            f"sum(typeof(\"{c}\") = 'integer' AND \"{c}\" NOT BETWEEN {INT32_MIN} AND "
            f"{INT32_MAX})" for c in narrow]
        row = self.con.execute(
            f'SELECT {", ".join(sums)} FROM "{table}"' + (f" WHERE {where}" if where else "")
        ).fetchone() or ()
        for col, n in zip(ids, row, strict=False):
            if n:
                self.unreadable[f"{table}.{col}"] = int(n)
        self.narrowed += int(sum(n or 0 for n in row[len(ids):]))

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """A small metadata query; an absent table or column gives no rows."""
        try:
            return self.con.execute(query).fetchall()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise
            return []


#: Tables of this many rows or more give the C heap's free pages back once read.
TRIM_ROWS = 100_000


class TableReader:
    """Reads tables on one background thread, through a connection of its own, in the order
    they were submitted. On exit, reads not yet started are cancelled and the rest awaited."""

    def __init__(self, db: ExportDb) -> None:
        self.db = ExportDb(db.path)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys-read")

    def submit(self, table: str, where: str = "", sort_by: str | None = None,
               prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
               ) -> Future[pl.DataFrame | None]:
        """The table, read on the background thread; sorted there by ``sort_by`` if given, so
        the sort overlaps work on this thread and the unsorted frame is freed before the
        result is handed over. ``prepare`` (rows filtered, say) runs there before the sort."""
        return self.pool.submit(self._read, table, where, sort_by, prepare)

    def _read(self, table: str, where: str, sort_by: str | None,
              prepare: Callable[[pl.DataFrame], pl.DataFrame] | None) -> pl.DataFrame | None:
        frame = self.db.read(table, where)
        if frame is None:
            return None
        if prepare is not None:
            frame = prepare(frame)
        if sort_by is not None:
            frame = sorted_by(frame, sort_by)
        if frame.height >= TRIM_ROWS:
            release_freed()  # what the read, ``prepare`` and the sort dropped
        return frame

    def __enter__(self) -> TableReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.db.con.close()


def sqlite_problem(exc: Exception) -> str:
    # SQLite's message can quote the file's own bytes (a damaged schema), which Python's sqlite3
    # then fails to decode: the message is in the error's bytes.
    raw = exc.object if isinstance(exc, UnicodeDecodeError) else None
    text = bytes(raw).decode("utf-8", "replace") if raw is not None else str(exc)
    if "locked" in text or "busy" in text:
        return "the SQLite database is locked by another process (is nsys still writing it?)"
    if "not a database" in text or "malformed" in text or "encrypted" in text:
        return f"is not a readable SQLite database ({text})"
    return f"cannot be read as SQLite ({text})"



def sorted_by(frame: pl.DataFrame, col: str) -> pl.DataFrame:
    """``frame`` sorted by ``col``; exports are mostly in order already, and a check is cheap.

    Where a sort is needed, ``frame`` is consumed: its columns are moved out of it one at a
    time (it is left empty), so that each column of the input is freed as soon as its sorted
    copy exists. Every caller owns the frame it sorts and drops it afterwards."""
    if frame.height < 2 or frame.select((pl.col(col).diff().drop_nulls() >= 0).all()).item():
        return frame
    # The order from the key alone, then each column gathered in turn and the input's column
    # dropped: a sort of the whole frame holds the frame, a one-chunk copy of it and the sorted
    # copy at once, and even a gather per column holds the input and the sorted copy (the
    # peak of an export's ingest: bench/NOTES.md, nsys memory). Each column is made one chunk
    # first: gathers from many chunks (one per connectorx batch) cost twice as much as a copy
    # into one chunk and a gather from it.
    order = frame.select(pl.arg_sort_by(col, maintain_order=True)).to_series()
    out = []
    big = frame.height >= TRIM_ROWS
    for name in frame.columns:
        column = frame.drop_in_place(name).rechunk()
        out.append(column.gather(order))
        del column
        if big:  # the column's buffers, where the C heap holds them (connectorx's)
            release_freed()
    return pl.DataFrame(out)


