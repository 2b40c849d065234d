"""The SQLite page reader (``_native/_sqlitescan.c``): the integer columns of a table as SQLite
reads them, on every sample export and on files built to hold each thing the format allows
(overflow pages, short records, every integer width, the rowid alias, reals, texts and blobs),
and a refusal, never a crash, on files it does not read as SQLite writes them."""

from __future__ import annotations

import random
import sqlite3
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceanalyzer.ingest.nsys import sqlite_pages
from traceanalyzer.ingest.nsys.sqlite_columns import read_table

pytestmark = pytest.mark.skipif(not sqlite_pages.AVAILABLE, reason="_sqlitescan not built")

SAMPLES = Path(__file__).parents[3] / "sample_traces"
EXPORTS = sorted(p for p in SAMPLES.rglob("*.sqlite"))


def _integer_columns(con: sqlite3.Connection, table: str) -> dict[str, pl.DataType]:
    return {row[1]: pl.Int64() for row in con.execute(f'PRAGMA table_info("{table}")')
            if str(row[2]).upper() == "INTEGER"}


def _by_sqlite(con: sqlite3.Connection, table: str, schema: dict[str, pl.DataType]
               ) -> pl.DataFrame:
    """What SQLite reads: integers as themselves, any other value as missing."""
    cols = ", ".join(f'CASE WHEN typeof("{c}") = \'integer\' THEN "{c}" END' for c in schema)
    rows = con.execute(f'SELECT {cols} FROM "{table}"').fetchall()
    return pl.DataFrame(rows, schema=schema, orient="row")


def _tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _read(path: Path, table: str, schema: dict[str, pl.DataType]) -> pl.DataFrame | None:
    con = sqlite3.connect(path)
    try:
        return sqlite_pages.read_pages(con, path, table, schema)
    finally:
        con.close()


def test_there_are_sample_exports():
    assert len(EXPORTS) >= 20


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.stem)
def test_every_integer_column_of_every_table_as_sqlite_reads_it(path: Path):
    con = sqlite3.connect(path)
    read = 0
    for table in _tables(con):
        schema = _integer_columns(con, table)
        if not schema:
            continue
        frame = sqlite_pages.read_pages(con, path, table, schema)
        assert frame is not None, table
        assert frame.equals(_by_sqlite(con, table, schema)), table
        read += 1
    con.close()
    assert read >= 5


def _database(path: Path, *steps: str | tuple[str, list[tuple[Any, ...]]]
              ) -> sqlite3.Connection:
    """A database at ``path`` made by ``steps``: SQL statements, or (statement, rows) pairs run
    for each row; committed, its connection left open."""
    con = sqlite3.connect(path)
    for step in steps:
        if isinstance(step, tuple):
            con.executemany(*step)
        else:
            con.execute(step)
    con.commit()
    return con


def test_parts_read_side_by_side_give_the_rows_in_order(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "many.sqlite"
    con = _database(path, "CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER)", (
        "INSERT INTO t VALUES (?, ?, ?)",
        [(i, -i * 7919, None if i % 3 else i) for i in range(50_000)]))
    schema = {"a": pl.Int64(), "b": pl.Int64(), "c": pl.Int64()}
    whole = _read(path, "t", schema)
    monkeypatch.setattr(sqlite_pages, "LEAVES_PER_PART", 4)
    monkeypatch.setattr(sqlite_pages, "usable_cpus", lambda: 4)
    parts = _read(path, "t", schema)
    assert whole is not None and parts is not None
    assert parts.equals(_by_sqlite(con, "t", schema))
    assert whole.equals(parts)
    assert parts.n_chunks() == 4  # read as four runs of leaves


def test_each_integer_width_and_sign(tmp_path: Path):
    path = tmp_path / "widths.sqlite"
    values = [0, 1, -1, 127, -128, 128, 32767, -32768, 2**23 - 1, -(2**23), 2**31 - 1,
              -(2**31), 2**31, -(2**31) - 1, 2**47 - 1, -(2**47), 2**63 - 1, -(2**63), 255,
              65535, 2**40]
    con = _database(path, "CREATE TABLE t (v INTEGER, w INTEGER)",
                    ("INSERT INTO t VALUES (?, ?)", [(v, v) for v in values]))
    schema = {"v": pl.Int64(), "w": pl.Int32()}
    frame = _read(path, "t", schema)
    assert frame is not None and frame["v"].to_list() == values
    # Int32: a value beyond it is missing, as SQLite's engines read and narrow it.
    assert frame["w"].to_list() == [v if -(2**31) <= v < 2**31 else None for v in values]
    assert frame.schema == pl.Schema(schema)
    assert frame.equals(read_table(con, path, "t", schema))


def test_reals_texts_and_blobs_are_missing_as_in_the_typed_reads(tmp_path: Path):
    path = tmp_path / "types.sqlite"
    con = _database(
        path, "CREATE TABLE t (a INTEGER, b)",  # b: no declared type, anything goes
        ("INSERT INTO t VALUES (?, ?)", [(1, 2.5), (2, "text"), (3, b"\x00\xff"), (4, None),
                                         (5, 6)]),
        f"INSERT INTO t VALUES ({2**66}, 7)",  # SQL: the driver refuses the number
    )
    schema = {"a": pl.Int64(), "b": pl.Int64()}
    frame = _read(path, "t", schema)
    assert frame is not None
    assert frame["a"].to_list() == [1, 2, 3, 4, 5, None]  # 2**66 is stored as a real
    assert frame["b"].to_list() == [None, None, None, None, 6, 7]
    assert frame.equals(read_table(con, path, "t", schema))


def test_records_with_overflow_pages(tmp_path: Path):
    """A row longer than a page keeps its tail on overflow pages: values after a long text
    are read from there."""
    path = tmp_path / "overflow.sqlite"
    _database(path, "PRAGMA page_size = 1024",
              "CREATE TABLE t (a INTEGER, note TEXT, b INTEGER, c INTEGER)",
              ("INSERT INTO t VALUES (?, ?, ?, ?)",
               [(i, "x" * (i * 997 % 20_000), i * 3, -i) for i in range(300)]))
    frame = _read(path, "t", {"c": pl.Int64(), "a": pl.Int64(), "b": pl.Int64()})
    assert frame is not None
    assert frame.rows() == [(-i, i, i * 3) for i in range(300)]


def test_a_column_added_later_is_missing_in_older_rows(tmp_path: Path):
    path = tmp_path / "added.sqlite"
    _database(path, "CREATE TABLE t (a INTEGER)", ("INSERT INTO t VALUES (?)", [(1,), (2,)]),
              "ALTER TABLE t ADD COLUMN b INTEGER", "INSERT INTO t VALUES (3, 30)")
    frame = _read(path, "t", {"a": pl.Int64(), "b": pl.Int64()})
    assert frame is not None and frame.rows() == [(1, None), (2, None), (3, 30)]


def test_a_column_with_a_default_is_left_to_sqlite(tmp_path: Path):
    path = tmp_path / "default.sqlite"
    con = _database(path, "CREATE TABLE t (a INTEGER)", "INSERT INTO t VALUES (1)",
                    "ALTER TABLE t ADD COLUMN b INTEGER DEFAULT 5")
    assert _read(path, "t", {"a": pl.Int64(), "b": pl.Int64()}) is None
    assert read_table(con, path, "t", {"a": pl.Int64(), "b": pl.Int64()}).rows() == [(1, 5)]


def test_the_rowid_alias_reads_the_rowid(tmp_path: Path):
    path = tmp_path / "alias.sqlite"
    # A comment that names DESC (as nsys's schema comments could) changes nothing.
    _database(path, "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, -- DESCRIBED\n"
                    "v INTEGER)",
              ("INSERT INTO t VALUES (?, ?)", [(5, 50), (2**40, 1), (-3, 9)]))
    frame = _read(path, "t", {"v": pl.Int64(), "id": pl.Int64()})
    assert frame is not None and frame.rows() == [(9, -3), (50, 5), (1, 2**40)]


def test_a_descending_integer_key_is_a_column_of_its_own(tmp_path: Path):
    """SQLite's quirk: INTEGER PRIMARY KEY DESC is no rowid alias, its value is in the record."""
    path = tmp_path / "desc.sqlite"
    con = _database(path, "CREATE TABLE t (id INTEGER PRIMARY KEY DESC, v INTEGER)",
                    ("INSERT INTO t VALUES (?, ?)", [(7, 1), (3, 2)]))
    schema = {"id": pl.Int64(), "v": pl.Int64()}
    frame = _read(path, "t", schema)
    assert frame is not None and frame.equals(_by_sqlite(con, "t", schema))


@pytest.mark.parametrize(("create", "insert"), [
    ("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER) WITHOUT ROWID",
     "INSERT INTO t (id, v) VALUES (1, 2)"),
    ("CREATE TABLE t (v INTEGER, w INTEGER GENERATED ALWAYS AS (v * 2))",
     "INSERT INTO t (v) VALUES (2)"),
])
def test_tables_not_plain_are_left_to_sqlite(tmp_path: Path, create: str, insert: str):
    path = tmp_path / "odd.sqlite"
    _database(path, create, insert)
    assert _read(path, "t", {"v": pl.Int64()}) is None


def test_a_wal_database_is_left_to_sqlite(tmp_path: Path):
    path = tmp_path / "wal.sqlite"
    con = _database(path, "PRAGMA journal_mode = WAL", "CREATE TABLE t (v INTEGER)",
                    "INSERT INTO t VALUES (1)")
    assert _read(path, "t", {"v": pl.Int64()}) is None
    assert read_table(con, path, "t", {"v": pl.Int64()}).rows() == [(1,)]


def test_text_columns_are_left_to_the_next_engine(tmp_path: Path):
    path = tmp_path / "text.sqlite"
    _database(path, "CREATE TABLE t (v INTEGER, s TEXT)", "INSERT INTO t VALUES (1, 'a')")
    assert _read(path, "t", {"v": pl.Int64(), "s": pl.String()}) is None


def _scan(path: Path, table: str, positions: tuple[int, ...], letters: bytes
          ) -> tuple[int, Any]:
    """The scanner itself, over every leaf of ``table``."""
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    con.close()
    counter, pages = sqlite_pages._sqlitescan.leaves(str(path), root)
    return sqlite_pages._sqlitescan.scan(str(path), counter, pages, positions, letters, -1)


def test_a_file_changed_since_its_leaves_were_listed_is_not_read(tmp_path: Path):
    path = tmp_path / "changing.sqlite"
    con = _database(path, "CREATE TABLE t (v INTEGER)", "INSERT INTO t VALUES (1)")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    counter, pages = sqlite_pages._sqlitescan.leaves(str(path), root)
    assert sqlite_pages._sqlitescan.scan(str(path), counter, pages, (0,), b"l", -1)[0] == 1
    con.execute("INSERT INTO t VALUES (2)")  # a writer bumps the file's change counter
    con.commit()
    with pytest.raises(ValueError, match="changed"):
        sqlite_pages._sqlitescan.scan(str(path), counter, pages, (0,), b"l", -1)


def test_leaves_the_caller_gives_are_checked(tmp_path: Path):
    path = tmp_path / "small.sqlite"
    con = _database(path, "CREATE TABLE t (v INTEGER)", "INSERT INTO t VALUES (1)")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    counter, pages = sqlite_pages._sqlitescan.leaves(str(path), root)
    beyond = (10**6).to_bytes(4, sys.byteorder)
    for bad in (beyond, b"\0\0\0\0", pages[:3]):  # past the file, page 0, not page numbers
        with pytest.raises(ValueError):
            sqlite_pages._sqlitescan.scan(str(path), counter, bad, (0,), b"l", -1)


def _damaged_copies(source: Path, folder: Path, count: int, seed: int) -> list[Path]:
    rng = random.Random(seed)
    data = source.read_bytes()
    out = []
    for i in range(count):
        damaged = bytearray(data)
        if i % 5 == 4:  # cut short
            damaged = damaged[: rng.randrange(100, len(damaged))]
        for _ in range(rng.randrange(1, 40)):
            at = rng.randrange(100, len(damaged))  # the header stays: SQLite must open it
            damaged[at] = rng.randrange(256)
        path = folder / f"damaged{i}.sqlite"
        path.write_bytes(bytes(damaged))
        out.append(path)
    return out


def test_damaged_files_are_refused_or_read_never_a_crash(tmp_path: Path):
    """Bytes flipped anywhere in an export, or the file cut short: every read either declines
    (the caller then reads through SQLite, which names the damage) or returns a frame of the
    table's columns; the process survives every one."""
    source = SAMPLES / "nsys" / "gpt_step_bad.sqlite"
    con = sqlite3.connect(source)
    positions = {t: tuple(range(len(cols))) for t in _tables(con)
                 if (cols := _integer_columns(con, t))}
    con.close()
    outcomes = {"read": 0, "refused": 0}
    for path in _damaged_copies(source, tmp_path, 60, seed=28):
        for table, where in positions.items():
            for letter in (b"l", b"i"):
                try:
                    rows, columns = _scan(path, table, where, letter * len(where))
                except (ValueError, sqlite3.DatabaseError):  # the scanner, or SQLite's master
                    outcomes["refused"] += 1
                    continue
                assert rows >= 0 and len(columns) == len(where)
                outcomes["read"] += 1
    assert outcomes["read"] and outcomes["refused"]


def test_damaged_exports_still_give_a_clear_error_or_frames(tmp_path: Path):
    from traceanalyzer.errors import InputError
    from traceanalyzer.ingest.nsys import read_nsys

    source = SAMPLES / "nsys" / "launch_bound_bad.sqlite"
    for path in _damaged_copies(source, tmp_path, 15, seed=7):
        try:
            read_nsys(path)
        except InputError as exc:
            assert str(exc)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        byte = data[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    raise AssertionError("unreachable")


@pytest.mark.parametrize("claim", [None, 16_000])
def test_overflow_chains_that_loop_end(tmp_path: Path, claim: int | None):
    """A damaged file whose records' overflow pages point back at themselves (and, with
    ``claim``, whose records say they are longer than they are): the scan ends, reading no
    more overflow than the file holds, with the values before the long text (they lie on the
    leaf) or a refusal (SQLite then reads the table, or says it is damaged)."""
    path = tmp_path / "loop.sqlite"
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 1024")
    con.execute("CREATE TABLE t (a INTEGER, note TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, "y" * 3000) for i in range(200)])
    con.commit()
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    con.close()
    data = bytearray(path.read_bytes())
    size, usable = 1024, 1024 - data[20]
    pages, looped = [root], 0
    while pages:
        page = pages.pop()
        base = (page - 1) * size
        at = base + (100 if page == 1 else 0)
        kind, cells = data[at], int.from_bytes(data[at + 3:at + 5], "big")
        header = 12 if kind == 0x05 else 8
        for c in range(cells):
            off = base + int.from_bytes(data[at + header + 2 * c:at + header + 2 * c + 2], "big")
            if kind == 0x05:
                pages.append(int.from_bytes(data[off:off + 4], "big"))
                continue
            total, p = _varint(data, off)
            _, p = _varint(data, p)
            max_local, min_local = usable - 35, (usable - 12) * 32 // 255 - 23
            local = min_local + (total - min_local) % (usable - 4)
            local = local if local <= max_local else min_local
            first = int.from_bytes(data[p + local:p + local + 4], "big")
            data[(first - 1) * size:(first - 1) * size + 4] = first.to_bytes(4, "big")
            if claim is not None:  # a two-byte varint, rewritten
                data[off:off + 2] = bytes([0x80 | (claim >> 7), claim & 0x7F])
            looped += 1
        if kind == 0x05:
            pages.append(int.from_bytes(data[at + 8:at + 12], "big"))
    assert looped == 200
    path.write_bytes(bytes(data))
    frame = _read(path, "t", {"a": pl.Int64()})
    if claim is None:
        assert frame is not None and frame["a"].to_list() == list(range(200))
    else:
        assert frame is None
