"""Bad-input corpus, each case through the real command line (a child process).

Every case ends one of two ways (README "Bad input", docs/reliability.md):

- unreadable input: exit code 2, one line on stderr naming the file and the problem, no
  traceback, and none of the requested output files exists;
- recoverable input: exit code 0, and where the problem is one the user must know about
  (truncation, duplicates, negative durations, dropped events), a warning in the terminal output,
  in the JSON report (``trace.meta.warnings``) and in the HTML report.

The cases are generated here (most are a few hundred bytes); ``tests/reliability/corpus/`` holds
the few inputs fuzzing found, which run through the same checks.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.nsys_fixtures import NsysBuilder
from tests.support.paths import PUBLIC, REPO

ALEXNET = PUBLIC / "kineto" / "hta_alexnet_sync.json.gz"
CORPUS = REPO / "tests" / "reliability" / "corpus"


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    json_path: Path
    html_path: Path

    @property
    def report(self) -> dict:
        return json.loads(self.json_path.read_text(encoding="utf-8"))

    @property
    def warnings(self) -> list[str]:
        return self.report["trace"]["warnings"]


def run_cli(trace: Path, out_dir: Path, *extra: str, env: dict[str, str] | None = None) -> Outcome:
    """``python -m traceanalyzer analyze TRACE --json .. --html ..`` in a child process."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out_dir / "out.json", out_dir / "out.html"
    proc = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", "analyze", str(trace), "--json", str(json_path),
         "--html", str(html_path), "--no-cache", *extra],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "TRACEANALYZER_DEBUG": "", **(env or {})},
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr, json_path, html_path)


def assert_rejected(out: Outcome, trace: Path, problem: str | None = None) -> None:
    """Exit 2, a one-line message naming the file, no traceback, no output files."""
    assert out.code == 2, (out.code, out.stdout[-2000:], out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: "), out.stderr
    assert str(trace) in lines[0] or trace.name in lines[0], out.stderr
    if problem is not None:
        assert problem in lines[0], out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert not out.json_path.exists() and not out.html_path.exists()
    # No temporary file of an atomic write left behind either.
    assert not [p for p in out.json_path.parent.iterdir() if p.name.startswith(".out.")]


def assert_analyzed(out: Outcome, warning: str | None = None) -> None:
    """Exit 0 and both reports written; ``warning`` (a substring) in terminal, JSON and HTML."""
    assert out.code == 0, (out.code, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr + out.stdout
    assert "internal error" not in out.stderr
    assert out.json_path.is_file() and out.html_path.is_file()
    if warning is not None:
        assert any(warning in w for w in out.warnings), out.warnings
        assert any(warning in line for line in out.stdout.splitlines()
                   if line.strip().startswith("warning:")), out.stdout[:3000]
        html = out.html_path.read_text(encoding="utf-8")
        assert warning in html, "warning missing from the HTML report"


def either(out: Outcome, trace: Path, warning: str | None = None) -> None:
    """Rejected cleanly, or analyzed (with ``warning`` when given)."""
    if out.code == 2:
        assert_rejected(out, trace)
    else:
        assert_analyzed(out, warning)


# ---------------------------------------------------------------------------------------------
# Small Kineto inputs


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def kernel(name: str, ts: float, dur: float, corr: int | None = 1, **over: object) -> dict:
    ev = {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
          "args": {"correlation": corr, "device": 0, "stream": 7, "grid": [1, 1, 1],
                   "block": [128, 1, 1]}}
    ev.update(over)
    return ev


def launch(ts: float, dur: float, corr: int) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
            "ts": ts, "dur": dur, "args": {"correlation": corr, "External id": corr}}


def base_events() -> list[dict]:
    return [launch(100, 5, 1), kernel("k_a", 110, 20, 1), launch(140, 5, 2),
            kernel("k_b", 150, 30, 2)]


def trace_doc(events: list) -> dict:
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU", "numSms": 10}],
            "traceEvents": events}


# Cases: name -> (writer(tmp) -> path, expectation, warning substring or None).
# expectation: "reject" (exit 2), "ok" (exit 0), "either".
Case = tuple[Callable[[Path], Path], str, str | None]


def _raw(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        p = tmp / name
        p.write_bytes(data)
        return p
    return make


def _doc(name: str, events: list) -> Callable[[Path], Path]:
    return lambda tmp: write_json(tmp / name, trace_doc(events))


def _text(name: str, text: str) -> Callable[[Path], Path]:
    return _raw(name, text.encode())


def _nested_args(depth: int, ts: str = "1") -> Callable[[Path], Path]:
    # ts="NaN": a NaN literal makes the fast NDJSON reader reject the chunk, so the per-line
    # fallback with json.loads meets the deep nesting too.
    def make(tmp: Path) -> Path:
        events = json.dumps(base_events())[1:-1]
        deep = '{"ph": "X", "cat": "cpu_op", "name": "deep", "pid": 1, "tid": 1, "ts": ' + ts + \
               ', "dur": 1, "args": {"x": ' + "[" * depth + "]" * depth + "}}"
        p = tmp / f"nested_{ts}_{depth}.json"
        p.write_text('{"traceEvents": [' + events + ", " + deep + "]}")
        return p
    return make



def _gzip(name: str, data: bytes, cut: int | None = None, flip: int | None = None) -> Callable:
    def make(tmp: Path) -> Path:
        blob = bytearray(gzip.compress(data))
        if flip is not None:
            for i in range(flip, min(flip + 8, len(blob) - 8)):
                blob[i] ^= 0xFF
        if cut is not None:
            blob = blob[:cut]
        p = tmp / name
        p.write_bytes(bytes(blob))
        return p
    return make


def _sqlite(name: str, build: Callable[[sqlite3.Connection], None]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        p = tmp / name
        con = sqlite3.connect(p)
        build(con)
        con.commit()
        con.close()
        return p
    return make


def _nsys_export(drop: dict[str, list[str]] | None = None, rename: tuple[str, str, str] | None = None,
                 name: str = "export.sqlite") -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        b = NsysBuilder()
        b.launch("gemm", 1000, 500, 2000, 3000)
        b.launch("relu", 1600, 500, 6000, 1000)
        p = b.write(tmp / name, drop_columns=drop)
        if rename:
            con = sqlite3.connect(p)
            con.execute(f"ALTER TABLE {rename[0]} RENAME COLUMN {rename[1]} TO {rename[2]}")
            con.commit()
            con.close()
        return p
    return make


GOOD = trace_doc(base_events())
GOOD_TEXT = json.dumps(GOOD)

CASES: dict[str, Case] = {
    "empty": (_raw("empty.json", b""), "reject", None),
    "whitespace_only": (_raw("blank.json", b"  \n\t\n"), "reject", None),
    "empty_gz": (_raw("empty.json.gz", gzip.compress(b"")), "reject", None),
    "not_json": (_raw("garbage.json", b"\x00\x01garbage\xff" * 10), "reject", None),
    "no_trace_events": (_text("noevents.json", '{"schemaVersion": 1, "foo": [1, 2]}'), "reject",
                        "traceEvents"),
    "trace_events_not_array": (_text("notarray.json", '{"traceEvents": {"a": 1}}'), "reject", None),
    "trace_events_null": (_text("null.json", '{"traceEvents": null}'), "reject", None),
    "top_level_scalar": (_text("scalar.json", "[1, 2, 3]"), "either", None),
    "empty_event_array": (_text("noev.json", '{"traceEvents": []}'), "ok", None),
    "json_array_format": (_text("arr.json", json.dumps(base_events())), "ok", None),
    "gzip_corrupt_middle": (_gzip("corrupt.json.gz", GOOD_TEXT.encode() * 50, flip=40), "either",
                            None),
    "gzip_bad_header": (_raw("badhdr.json.gz", b"\x1f\x8b\x08\xff\xff" + b"\x00" * 40), "reject",
                        None),
    "gzip_only_magic": (_raw("magic.json.gz", b"\x1f\x8b"), "reject", None),
    "missing_fields": (_doc("missing.json", [
        *base_events(), {"ph": "X"}, {"cat": "kernel"}, {"name": "x", "ts": 5},
        {"ph": "X", "cat": "kernel", "name": "nots", "dur": 3}, {}]), "ok", "usable timestamp"),
    "null_fields": (_doc("nulls.json", [
        *base_events(), {"ph": None, "cat": None, "name": None, "pid": None, "tid": None,
                         "ts": None, "dur": None, "args": None},
        kernel(None, 300, 10, None), kernel("k_nullargs", 320, 5, args=None),
        kernel("k_null_ts", None, 5, 4)]), "ok",
                    "usable timestamp"),
    "wrong_types": (_doc("types.json", [
        *base_events(),
        kernel("k_str_ts", "200", "x"), kernel(["list", "name"], 210, 5),
        kernel("k_obj", {"a": 1}, [1]), kernel("k_bool", True, False),
        kernel("k_args_str", 230, 5, args="not an object"),
        kernel("k_grid", 240, 5, args={"grid": "1,2,3", "block": [None, "x"], "correlation": "7",
                                       "stream": {"s": 1}, "device": [0]}),
        {"ph": 5, "cat": 6, "name": 7, "pid": [1], "tid": {"t": 1}, "ts": 260, "dur": 1},
        "a string event", 42, None, [1, 2]]), "ok", None),
    "negative_duration": (_doc("negdur.json", [*base_events(), kernel("k_neg", 200, -50, 3)]), "ok",
                          "negative duration"),
    "timestamps_out_of_order": (_doc("order.json", list(reversed(base_events()))), "ok", None),
    "int_beyond_int64": (_text("bigint.json", GOOD_TEXT.replace(
        '"ts": 150', '"ts": 123456789012345678901234567890').replace(
        '"stream": 7', '"stream": 99999999999999999999999', 1)), "ok", "usable timestamp"),
    "nan_infinity": (_text("nan.json", GOOD_TEXT.replace('"dur": 20', '"dur": NaN').replace(
        '"ts": 140', '"ts": Infinity').replace('"ts": 100', '"ts": -Infinity')), "ok",
                     "usable timestamp"),
    "invalid_utf8": (_raw("utf8.json", GOOD_TEXT.replace("k_a", "k_\udcff").encode(
        "utf-8", "surrogateescape").replace(b"\\udcff", b"\xff\xfe")), "ok", None),
    "invalid_utf8_raw": (_raw("utf8raw.json", GOOD_TEXT.encode().replace(b"k_b", b"k_\xc3\x28\xff")),
                         "ok", None),
    "deeply_nested_args": (_nested_args(100_000), "either", None),
    "deeply_nested_args_slow_path": (_nested_args(100_000, ts="NaN"), "either", None),
    "deeply_nested_metadata_before": (_text("deepmeta.json", '{"x": ' + "[" * 100_000 +
                                             "]" * 100_000 + ', "traceEvents": []}'), "ok",
                                      "metadata"),
    "deeply_nested_metadata_after": (_text("deepmeta2.json", '{"traceEvents": [], "x": ' +
                                           "[" * 100_000 + "]" * 100_000 + "}"), "ok", "metadata"),
    "deeply_nested_event_array": (_text("deepev.json", '{"traceEvents": [' + "[" * 100_000 +
                                        "]" * 100_000 + "]}"), "ok", None),
    "deeply_nested_top_level_array": (_text("deeparr.json", "[" * 100_000 + "]" * 100_000),
                                      "either", None),
    "duplicate_events": (_doc("dups.json", base_events() + base_events()[1:2] * 3), "ok",
                         "duplicate"),
    "kernel_without_launch": (_doc("orphan_k.json", [launch(100, 5, 1), kernel("k_a", 110, 20, 1),
                                                     kernel("k_orphan", 150, 30, 99)]), "ok", None),
    "launch_without_kernel": (_doc("orphan_l.json", [*base_events(), launch(300, 5, 77)]), "ok",
                              None),
    "only_cpu_events": (_doc("cpu.json", [launch(100, 5, 1)]), "ok", None),
    "bom_prefixed": (_raw("bom.json", b"\xef\xbb\xbf" + GOOD_TEXT.encode()), "ok", None),
    "trailing_garbage": (_text("trail.json", GOOD_TEXT + "}}]]garbage"), "ok", None),
    "sqlite_not_nsys": (_sqlite("other.sqlite", lambda c: c.execute("CREATE TABLE t (a INTEGER)")),
                        "reject", None),
    "sqlite_empty_db": (_sqlite("emptydb.sqlite", lambda c: c.execute("PRAGMA user_version=1")),
                        "reject", None),
    "sqlite_header_only": (_raw("hdr.sqlite", b"SQLite format 3\x00" + b"\x00" * 84), "reject",
                           None),
    "sqlite_truncated_garbage": (_raw("garb.sqlite", b"SQLite format 3\x00" + b"\xab" * 5000),
                                 "reject", None),
    "nsys_missing_columns": (_nsys_export(drop={"CUPTI_ACTIVITY_KIND_KERNEL": ["deviceId",
                                                                                "streamId"]}),
                             "either", None),
    "nsys_missing_start": (_nsys_export(drop={"CUPTI_ACTIVITY_KIND_KERNEL": ["start"]}), "either",
                           None),
    "nsys_renamed_column": (_nsys_export(rename=("CUPTI_ACTIVITY_KIND_KERNEL", "end", "stop")),
                            "either", None),
    "nsys_renamed_string_column": (_nsys_export(rename=("StringIds", "value", "text")), "either",
                                   None),
    "nsys_rep_empty": (_raw("empty.nsys-rep", b""), "reject", None),
    "perfetto_garbage": (_raw("garbage.pftrace", b"\x0a" + bytes(range(256)) * 8), "either", None),
    "perfetto_huge_length": (_raw("huge.pftrace", b"\x0a\xff\xff\xff\xff\x0f" + b"\x00" * 10),
                             "either", None),
    "perfetto_only_tag": (_raw("tag.pftrace", b"\x0a"), "either", None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name: str, tmp_path: Path) -> None:
    make, expect, warning = CASES[name]
    trace = make(tmp_path)
    out = run_cli(trace, tmp_path / "out")
    if expect == "reject":
        assert_rejected(out, trace, warning)
    elif expect == "ok":
        assert_analyzed(out, warning)
    else:
        either(out, trace)


def test_bom_prefixed_metadata_is_read(tmp_path: Path) -> None:
    trace = tmp_path / "bom.json"
    trace.write_bytes(b"\xef\xbb\xbf" + GOOD_TEXT.encode())
    out = run_cli(trace, tmp_path / "out")
    assert_analyzed(out)
    assert out.warnings == []
    assert out.report["trace"]["devices"][0]["name"] == "GPU"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    folder = tmp_path / "trace.json"
    folder.mkdir()
    assert_rejected(run_cli(folder, tmp_path / "out"), folder, "directory")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json.gz"
    assert_rejected(run_cli(missing, tmp_path / "out"), missing)


def test_output_folder_missing(tmp_path: Path) -> None:
    trace = write_json(tmp_path / "t.json", GOOD)
    out = tmp_path / "no" / "such" / "folder" / "r.html"
    proc = subprocess.run([sys.executable, "-m", "traceanalyzer", "analyze", str(trace),
                           "--no-cache", "--html", str(out)], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(out) in line and "Traceback" not in proc.stderr


def test_output_to_a_fifo_is_refused(tmp_path: Path) -> None:
    """A FIFO is neither written through (with no reader it blocks for ever) nor replaced by a
    rename: the output guard refuses it in one line (``-`` or /dev/stdout for standard
    output)."""
    trace = write_json(tmp_path / "t.json", GOOD)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "traceanalyzer", "analyze", str(trace),
                           "--no-cache", "--json", str(fifo)], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "FIFO" in line and "Traceback" not in proc.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    out = subprocess.run([sys.executable, "-m", "traceanalyzer", "analyze", str(trace),
                          "--no-cache", "-qq", "--json", "/dev/stdout"], capture_output=True,
                         text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["metrics"]["kernel_count"] == 2


@pytest.mark.parametrize("option", [["--ranks", "7"], ["--time-window", "100s:200s"],
                                    ["--steps", "3"], ["--ranks", "x"], ["--time-window", "1:2"]])
def test_selection_that_misses(option: list[str], tmp_path: Path) -> None:
    """A selection that holds no events is an error, not an empty report that looks idle."""
    trace = write_json(tmp_path / "t.json", GOOD)
    out = run_cli(trace, tmp_path / "out", *option)
    assert out.code == 2, out.stdout
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert not out.json_path.exists() and not out.html_path.exists()


def test_out_of_order_gives_same_metrics(tmp_path: Path) -> None:
    """File order must not matter: the same events reversed give the same metrics."""
    a = run_cli(write_json(tmp_path / "a.json", trace_doc(base_events())), tmp_path / "oa")
    b = run_cli(write_json(tmp_path / "b.json", trace_doc(base_events()[::-1])), tmp_path / "ob")
    assert_analyzed(a)
    assert_analyzed(b)
    assert a.report["metrics"] == b.report["metrics"]


def test_duplicates_do_not_change_metrics(tmp_path: Path) -> None:
    a = run_cli(write_json(tmp_path / "a.json", trace_doc(base_events())), tmp_path / "oa")
    b = run_cli(write_json(tmp_path / "b.json", trace_doc(base_events() * 2)), tmp_path / "ob")
    assert_analyzed(b, "duplicate")
    assert a.report["metrics"]["busy_ns"] == b.report["metrics"]["busy_ns"]
    assert a.report["metrics"]["kernel_count"] == b.report["metrics"]["kernel_count"]


def test_orphan_kernel_is_counted(tmp_path: Path) -> None:
    trace = write_json(tmp_path / "o.json", trace_doc(
        [launch(100, 5, 1), kernel("k_a", 110, 20, 1), kernel("k_orphan", 150, 30, 99)]))
    out = run_cli(trace, tmp_path / "out")
    assert_analyzed(out)
    assert out.report["metrics"]["kernel_count"] == 2
    assert out.report["trace"]["extra"].get("gpu_without_launch") == 1


# ---------------------------------------------------------------------------------------------
# A file that changes while it is read


def _trace_file(fmt: str, tmp_path: Path) -> Path:
    torch_trace = REPO / "sample_traces" / "torch" / "gpt_step_bad.json.gz"
    if fmt == "kineto":
        src = torch_trace
    elif fmt == "nsys":
        src = REPO / "sample_traces" / "nsys" / "gpt_step_bad.sqlite"
    else:
        from traceanalyzer.ingest import read_any
        from traceanalyzer.report.perfetto_writer import write_perfetto_annotated

        src = tmp_path / "src.pftrace"
        write_perfetto_annotated(read_any(torch_trace), [], src)
    path = tmp_path / f"trace{''.join(src.suffixes)}"
    path.write_bytes(src.read_bytes())
    return path


def _entries(cache: Path) -> list[Path]:
    return [p for p in cache.iterdir() if not p.name.startswith(".")] if cache.is_dir() else []


@pytest.mark.parametrize("fmt", ["kineto", "nsys", "perfetto"])
def test_a_file_that_grows_while_read_is_flagged_and_not_cached(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace still being written (or cut shorter) while it is read: every format's read says
    so, with both sizes, and the cache keeps nothing (its key hashed other bytes than were read)."""
    import importlib

    from traceanalyzer.ingest import read_any
    from traceanalyzer.ingest.cache import cached_read

    module = importlib.import_module(f"traceanalyzer.ingest.{fmt}")
    reader = getattr(module, f"read_{fmt}")
    path = _trace_file(fmt, tmp_path)
    size = path.stat().st_size

    def read_then_grow(p, *args, **kwargs):
        trace = reader(p, *args, **kwargs)
        with open(path, "ab") as fh:  # the producer writes on after the reader is done
            fh.write(b"\0" * 100)
        return trace

    monkeypatch.setattr(module, f"read_{fmt}", read_then_grow)
    cache = tmp_path / "cache"
    trace = cached_read(path, fmt, cache_dir=cache)
    warning = f"the file changed while it was being read ({size:,} -> {size + 100:,} bytes)"
    assert any(w.startswith(warning) for w in trace.meta.warnings), trace.meta.warnings
    assert trace.meta.extra["changed_while_read"] is True
    assert trace.gpu.height > 0
    assert _entries(cache) == []

    monkeypatch.setattr(module, f"read_{fmt}", reader)  # read again, left alone
    os.truncate(path, size)
    again = read_any(path)
    assert not any("changed while" in w for w in again.meta.warnings)
    assert "changed_while_read" not in again.meta.extra
    cached_read(path, fmt, cache_dir=cache)
    assert len(_entries(cache)) == 1


@pytest.mark.parametrize("change", ["rewritten", "removed"])
def test_a_file_rewritten_or_removed_while_read_is_flagged(
    change: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Overwritten with as many bytes (``cp`` of a trace of the same size): the size alone would
    not show it, the modification time does. Removed: the read stands, and says so."""
    from traceanalyzer.ingest import kineto, read_any

    path = _trace_file("kineto", tmp_path)
    size, reader = path.stat().st_size, kineto.read_kineto

    def read_then_change(p):
        trace = reader(p)
        if change == "removed":
            path.unlink()
        else:
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        return trace

    monkeypatch.setattr(kineto, "read_kineto", read_then_change)
    trace = read_any(path)
    how = "removed" if change == "removed" else f"rewritten, {size:,} bytes"
    assert f"the file changed while it was being read ({how}); analyzed what the read saw" \
        in trace.meta.warnings
    assert trace.meta.extra["changed_while_read"] is True and trace.gpu.height > 0


# ---------------------------------------------------------------------------------------------
# SQLite: locked and read-only


def test_sqlite_locked_exclusively(tmp_path: Path) -> None:
    """Another connection holds an exclusive lock: a clear error (or a result), never a hang."""
    db = _nsys_export()(tmp_path)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE lock_me (a)")
    try:
        out = run_cli(db, tmp_path / "out")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    either(out, db)
    if out.code == 2:
        assert "lock" in out.stderr.lower(), out.stderr


def test_sqlite_read_only(tmp_path: Path) -> None:
    """A read-only export in a read-only folder (no journal can be created) still analyzes."""
    folder = tmp_path / "ro"
    folder.mkdir()
    db = _nsys_export()(folder)
    db.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        out = run_cli(db, tmp_path / "out")
    finally:
        folder.chmod(stat.S_IRWXU)
    assert_analyzed(out)
    assert out.report["metrics"]["kernel_count"] == 2
    assert not list(folder.glob("*-journal")) and not list(folder.glob("*-wal"))


def test_sqlite_wal_mode(tmp_path: Path) -> None:
    db = _nsys_export()(tmp_path)
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    assert_analyzed(run_cli(db, tmp_path / "out"))


# ---------------------------------------------------------------------------------------------
# .nsys-rep with and without nsys on PATH


def _fake_nsys(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nsys"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return folder


def _env_without_nsys(tmp: Path, bin_dir: Path | None) -> dict[str, str]:
    path = os.environ.get("PATH", "")
    parts = [p for p in path.split(os.pathsep) if p and not (Path(p) / "nsys").exists()]
    if bin_dir is not None:
        parts.insert(0, str(bin_dir))
    return {"PATH": os.pathsep.join(parts), "NSYS": "",
            "TRACEANALYZER_CACHE_DIR": str(tmp / "cache")}


@pytest.mark.parametrize("nsys", ["absent", "fails", "writes_garbage", "writes_nothing"])
@pytest.mark.parametrize("size", [0, 64])
def test_nsys_rep(nsys: str, size: int, tmp_path: Path) -> None:
    rep = tmp_path / "report.nsys-rep"
    rep.write_bytes(os.urandom(size))
    bodies = {
        "fails": 'echo "nsys: cannot open report" >&2; exit 1',
        # The stand-in writes garbage where --output points (the argument after --output).
        "writes_garbage": 'while [ "$1" != "--output" ]; do shift; done; '
                          'printf "SQLite format 3\\000garbage" > "$2"; exit 0',
        "writes_nothing": "exit 0",
    }
    bin_dir = None if nsys == "absent" else _fake_nsys(tmp_path / "bin", bodies[nsys])
    out = run_cli(rep, tmp_path / "out", env=_env_without_nsys(tmp_path, bin_dir))
    assert_rejected(out, rep)
    if size == 0:
        assert "empty" in out.stderr
    elif nsys == "absent":
        assert "nsys" in out.stderr


# ---------------------------------------------------------------------------------------------
# Truncation of a real trace at many cut points


def _cut_points(size: int, count: int = 20) -> list[int]:
    return sorted({0, 1, 2, *(size * i // count for i in range(1, count)), size - 2, size - 1})


def _run_many(traces: list[Path], tmp: Path) -> list[Outcome]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda ip: run_cli(ip[1], tmp / f"out{ip[0]}"), enumerate(traces)))


@pytest.mark.slow
def test_truncated_json_at_many_cut_points(tmp_path: Path) -> None:
    if not ALEXNET.is_file():
        pytest.skip("public traces are not available")
    raw = gzip.decompress(ALEXNET.read_bytes())
    events_at = raw.index(b'"traceEvents"')
    traces = []
    for cut in _cut_points(len(raw)):
        p = tmp_path / f"cut_{cut}.json"
        p.write_bytes(raw[:cut])
        traces.append(p)
    full = run_cli(ALEXNET, tmp_path / "full")
    assert_analyzed(full)
    full_kernels = full.report["metrics"]["kernel_count"]
    for trace, out in zip(traces, _run_many(traces, tmp_path), strict=True):
        cut = trace.stat().st_size
        if cut <= events_at:  # cut before the event array: nothing to analyze
            assert_rejected(out, trace)
            continue
        either(out, trace)
        if out.code == 0:
            assert out.report["metrics"]["kernel_count"] <= full_kernels
            if cut < len(raw) - 3:
                assert out.warnings, f"cut at {cut} of {len(raw)}: no warning"


@pytest.mark.slow
def test_truncated_gzip_at_many_cut_points(tmp_path: Path) -> None:
    if not ALEXNET.is_file():
        pytest.skip("public traces are not available")
    blob = ALEXNET.read_bytes()
    traces = []
    for cut in _cut_points(len(blob), 12):
        p = tmp_path / f"cut_{cut}.json.gz"
        p.write_bytes(blob[:cut])
        traces.append(p)
    for trace, out in zip(traces, _run_many(traces, tmp_path), strict=True):
        either(out, trace)
        if out.code == 0 and trace.stat().st_size < len(blob):
            assert any("ends early" in w or "truncated" in w for w in out.warnings), out.warnings


@pytest.mark.slow
def test_truncated_nsys_export(tmp_path: Path) -> None:
    src = PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite"
    if not src.is_file():
        pytest.skip("public traces are not available")
    raw = src.read_bytes()
    traces = []
    for cut in [c for c in _cut_points(len(raw), 6) if c > 1000]:
        p = tmp_path / f"cut_{cut}.sqlite"
        p.write_bytes(raw[:cut])
        traces.append(p)
    outcomes = _run_many(traces, tmp_path)
    for trace, out in zip(traces, outcomes, strict=True):
        either(out, trace)
    assert outcomes[0].code == 2 and "malformed" in outcomes[0].stderr


# ---------------------------------------------------------------------------------------------
# Inputs that fuzzing found: every file in tests/reliability/corpus/ is rejected cleanly or
# analyzed.


def corpus_files() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*") if p.is_file() and p.suffix != ".md") \
        if CORPUS.is_dir() else []


@pytest.mark.parametrize("trace", corpus_files(), ids=lambda p: p.name)
def test_corpus_file(trace: Path, tmp_path: Path) -> None:
    either(run_cli(trace, tmp_path / "out"), trace)
