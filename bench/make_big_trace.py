"""Make a big, valid, realistic trace by tiling a real one (for the benchmarks in bench/).

    python bench/make_big_trace.py kineto SEED.json[.gz] OUT.json[.gz] --size 1GB
    python bench/make_big_trace.py nsys SEED.sqlite OUT.sqlite --size 1GB

Kineto: the seed's events are repeated as whole periods (the seed's time span plus a gap), each
copy shifted by the period, with correlation, External id, Python ids and flow ids renumbered so
links stay unique across copies and ``ProfilerStep#N`` renumbered so steps keep counting up.
Metadata events (ph "M") appear once. The last copy is cut at a timestamp so the file lands near
the requested size (sizes below the seed's are one such time window). Each event is written over
several lines as Kineto does. The seed's events are turned into one ``%``-format template once;
each copy is then a single C-level format call, so 2 GB takes about a minute.

nsys: the seed database is copied and every activity table (any table with ``start`` and
``end`` columns) gets shifted copies of its rows with renumbered ``correlationId``, via one
``INSERT ... SELECT`` per table over a table of copy numbers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
TS, ID, STEPNO = 0, 1, 2
GAP_US = 1000  # between copies: a realistic pause between profiled windows


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(?i)\s*([\d.]+)\s*([kmg]?)b?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 500MB, 1GB)")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def _load_json(path: Path) -> dict[str, Any]:
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        top = json.load(fh)
    if isinstance(top, list):
        top = {"traceEvents": top}
    return top


class _Template:
    """The seed's tiled events as ``%`` templates; slots hold the values each copy shifts."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.slot_base: list[int] = []
        self.slot_kind: list[int] = []
        self.ts: list[float] = []

    def slot(self, value: int, kind: int) -> str:
        self.slot_base.append(value)
        self.slot_kind.append(kind)
        return "%d"

    def add(self, ev: dict[str, Any]) -> None:
        top, args = [], []
        for key, value in ev.items():
            if key == "args" and isinstance(value, dict):
                continue
            top.append(f"{_key(key)}: {self._value(key, value, ev)}")
        lines = ["  {", "    " + ", ".join(top)]
        if isinstance(ev.get("args"), dict):
            for key, value in ev["args"].items():
                if key in ID_ARGS and _is_int(value):
                    text = self.slot(value, ID)
                else:
                    text = _dump(value).replace("%", "%%")
                args.append(f"      {_key(key)}: {text}")
            lines[-1] += ","
            lines.append('    "args": {')
            lines.append(",\n".join(args))
            lines.append("    }")
        lines.append("  }")
        self.texts.append("\n".join(lines))
        ts = ev.get("ts")
        self.ts.append(float(ts) if isinstance(ts, (int, float)) else math.inf)

    def _value(self, key: str, value: Any, ev: dict[str, Any]) -> str:
        if key == "ts" and isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, int):
                return self.slot(value, TS)
            text = repr(float(value))
            if "e" in text or "n" in text:
                return _dump(value)
            whole, frac = text.split(".")
            return self.slot(int(whole), TS) + "." + frac
        if key == "id" and ev.get("ph") in ("s", "t", "f") and _is_int(value):
            return self.slot(value, ID)
        if key == "name" and isinstance(value, str):
            m = STEP.match(value)
            if m:
                return '"ProfilerStep#' + self.slot(int(m.group(1)), STEPNO) + '"'
        return _dump(value).replace("%", "%%")


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _key(key: str) -> str:
    return _dump(key).replace("%", "%%")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _open_out(path: Path, level: int) -> BinaryIO:
    if path.name.endswith(".gz"):
        try:
            from isal import igzip  # ~4x faster than zlib when installed

            return igzip.open(path, "wb", compresslevel=min(level, 3))  # type: ignore[return-value]
        except ImportError:
            return gzip.open(path, "wb", compresslevel=level)  # type: ignore[return-value]
    return open(path, "wb")


def tile_kineto(seed: Path, out: Path, size: int, gz_level: int = 1) -> dict[str, Any]:
    """Write ``out`` (.json or .json.gz) with about ``size`` uncompressed bytes tiled from ``seed``."""
    top = _load_json(seed)
    events = [e for e in top.get("traceEvents", []) if isinstance(e, dict)]
    meta_events = [e for e in events if e.get("ph") == "M"]
    tiled = [e for e in events if e.get("ph") != "M"]
    starts = [e["ts"] for e in tiled if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + (e.get("dur") or 0) for e in tiled
            if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur") or 0, (int, float))]
    period = int(math.ceil(max(ends) - min(starts))) + GAP_US
    ids = [e["args"][k] for e in tiled if isinstance(e.get("args"), dict)
           for k in ID_ARGS if _is_int(e["args"].get(k))]
    ids += [e["id"] for e in tiled if e.get("ph") in ("s", "t", "f") and _is_int(e.get("id"))]
    id_span = max(ids, default=0) + 1
    steps = [int(m.group(1)) for e in tiled if isinstance(e.get("name"), str)
             and (m := STEP.match(e["name"]))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0

    tpl = _Template()
    slot_counts = []
    for ev in tiled:
        before = len(tpl.slot_base)
        tpl.add(ev)
        slot_counts.append(len(tpl.slot_base) - before)
    template = ",\n".join(tpl.texts)
    base = np.array(tpl.slot_base, dtype=np.int64)
    kind = np.array(tpl.slot_kind, dtype=np.int64)
    copy_bytes = len(template.encode())

    rest = {k: v for k, v in top.items() if k != "traceEvents"}
    head = json.dumps(rest, indent=2, ensure_ascii=False)[:-2] if rest else "{"
    head = (head + ",\n" if rest else "{\n") + '  "traceEvents": [\n'
    meta_text = ",\n".join(
        "  " + json.dumps(e, ensure_ascii=False).replace("%", "%%") for e in meta_events
    )
    written = 0
    copies = 0
    with _open_out(out, gz_level) as fh:
        def put(text: str) -> None:
            nonlocal written
            data = text.encode()
            fh.write(data)
            written += len(data)

        put(head)
        if meta_text:
            put(meta_text % ())
        while written < size:
            k = copies
            shift = np.array([k * period, k * id_span, k * step_span], dtype=np.int64)
            values = base + shift[kind]
            sep = ",\n" if (written > len(head) or meta_text) else ""
            if written + copy_bytes <= size or copies == 0 and copy_bytes <= size:
                put(sep + template % tuple(values.tolist()))
            else:
                _put_window(put, sep, tpl, slot_counts, values, size - written, copy_bytes)
                copies += 1
                break
            copies += 1
            if copies > 1_000_000:
                raise SystemExit("seed has no events to tile")
        put("\n  ]\n}\n")
    return {"out": str(out), "uncompressed_bytes": written, "copies": copies,
            "period_us": period, "events": len(meta_events) + copies * len(tiled)}


def _put_window(put: Any, sep: str, tpl: _Template, slot_counts: list[int], values: np.ndarray,
                budget: int, copy_bytes: int) -> None:
    """Write the events of one copy that start before a cut chosen to use about ``budget`` bytes."""
    ts = np.array(tpl.ts)
    sizes = np.array([len(t) + 2 for t in tpl.texts], dtype=np.int64)
    order = np.argsort(ts, kind="stable")
    cum = np.cumsum(sizes[order])
    n = max(1, int(np.searchsorted(cum, budget)))
    keep = np.zeros(len(ts), dtype=bool)
    keep[order[:n]] = True
    slot_keep = np.repeat(keep, slot_counts)
    text = ",\n".join(t for t, k in zip(tpl.texts, keep, strict=True) if k)
    put(sep + text % tuple(values[slot_keep].tolist()))


def tile_nsys(seed: Path, out: Path, size: int) -> dict[str, Any]:
    """Copy ``seed`` (.sqlite, or .sqlite.gz as the held-out exports are kept) to ``out`` and add
    shifted copies of its activity rows until about ``size``."""
    if seed.name.endswith(".gz"):
        with gzip.open(seed, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        shutil.copyfile(seed, out)
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    tables = []
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
        if "start" in cols and "end" in cols:
            count = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
            if count:
                tables.append((name, cols))
    if not tables:
        raise SystemExit(f"{seed}: no activity tables (start/end columns) to tile")
    lo = min(con.execute(f'SELECT min(start) FROM "{t}"').fetchone()[0] for t, _ in tables)
    hi = max(con.execute(f'SELECT max(coalesce("end", start)) FROM "{t}"').fetchone()[0]
             for t, _ in tables)
    period = int(hi - lo) + GAP_US * 1000
    id_span = 1 + max((con.execute(f'SELECT max(correlationId) FROM "{t}"').fetchone()[0] or 0)
                      for t, cols in tables if "correlationId" in cols)
    seed_rows = {t: con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] for t, _ in tables}
    seed_size = out.stat().st_size  # the seed as SQLite (a .gz seed is unpacked)
    # Measure what copies really add, then size the rest from them. One copy of a small seed
    # can fit in the free pages of the file and add nothing: double the copies until the file
    # has grown by a megabyte (or reached the size), then extrapolate.
    done = 1
    while True:
        _insert_copies(con, tables, seed_rows, period, id_span, done, 2 * done)
        done *= 2
        grown = out.stat().st_size - seed_size
        if grown >= min(1 << 20, size - seed_size) or done >= 1 << 20:
            break
    per_copy = max(1.0, grown / (done - 1))
    copies = max(done, math.ceil((size - seed_size) / per_copy) + 1)
    if copies > done:
        _insert_copies(con, tables, seed_rows, period, id_span, done, copies)
    con.close()
    return {"out": str(out), "bytes": out.stat().st_size, "copies": copies, "period_ns": period}


def _insert_copies(con: sqlite3.Connection, tables: list[tuple[str, list[str]]],
                   seed_rows: dict[str, int], period: int, id_span: int, first: int,
                   stop: int) -> None:
    """Insert copies ``first .. stop-1`` of each table's seed rows (rowid <= the seed's max)."""
    con.execute("DROP TABLE IF EXISTS temp._k")
    con.execute("CREATE TEMP TABLE _k(k INTEGER)")
    con.execute("WITH RECURSIVE c(k) AS (SELECT ? UNION ALL SELECT k + 1 FROM c WHERE k + 1 < ?) "
                "INSERT INTO _k SELECT k FROM c", (first, stop))
    for name, cols in tables:
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f'"{c}" + _k.k * {period}')
            elif c == "correlationId":
                exprs.append(f'"{c}" + _k.k * {id_span}')
            else:
                exprs.append(f'"{c}"')
        collist = ", ".join(f'"{c}"' for c in cols)
        con.execute(f'INSERT INTO "{name}" ({collist}) SELECT {", ".join(exprs)} '
                    f'FROM _k CROSS JOIN "{name}" WHERE "{name}".rowid <= {seed_rows[name]} '
                    "ORDER BY _k.k")
    con.commit()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("format", choices=["kineto", "nsys"])
    ap.add_argument("seed", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", type=parse_size, required=True, help="e.g. 10MB, 1GB (uncompressed)")
    ap.add_argument("--gzip-level", type=int, default=1)
    a = ap.parse_args(argv)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.format == "kineto":
        info = tile_kineto(a.seed, a.out, a.size, a.gzip_level)
    else:
        info = tile_nsys(a.seed, a.out, a.size)
    print(json.dumps(info), file=sys.stdout)


if __name__ == "__main__":
    main()
