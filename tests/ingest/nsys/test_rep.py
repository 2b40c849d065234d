""".nsys-rep inputs: exported through a stand-in `nsys` executable, cached by content hash."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.support.nsys_fixtures import NsysBuilder
from traceanalyzer.errors import InputError
from traceanalyzer.ingest import read_any, sniff
from traceanalyzer.ingest.nsys import read_nsys_rep

# A stand-in for `nsys export --type sqlite ... --output OUT REP`: copies $FAKE_NSYS_SOURCE to
# OUT, logs each call, and fails when $FAKE_NSYS_FAIL is set, as a real export can.
FAKE_NSYS = """#!{python}
import os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_NSYS_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if os.environ.get("FAKE_NSYS_FAIL"):
    sys.stderr.write("Importing...\\nERROR: Report file is corrupted or truncated\\n")
    sys.exit(1)
assert args[:3] == ["export", "--type", "sqlite"], args
out = args[args.index("--output") + 1]
shutil.copy(os.environ["FAKE_NSYS_SOURCE"], out)
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nsys"
    script.write_text(FAKE_NSYS.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    source = NsysBuilder()
    source.launch("gemm_kernel", 0, 10, 100, 50)
    source.launch("relu_kernel", 20, 10, 200, 30)
    monkeypatch.setenv("FAKE_NSYS_SOURCE", str(source.write(tmp_path / "export.sqlite")))
    log = tmp_path / "calls.log"
    log.touch()
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    return log


@pytest.fixture
def no_nsys(tmp_path, monkeypatch):
    empty = tmp_path / "emptybin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(tmp_path / "cache"))


def report(tmp_path: Path, content: bytes = b"NSYS-REP\x00fake report body") -> Path:
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(content)
    return path


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_export_through_nsys_then_cache(tmp_path, fake_nsys):
    rep = report(tmp_path)
    trace = read_nsys_rep(rep)
    trace.validate()
    assert trace.gpu["name"].to_list() == ["gemm_kernel", "relu_kernel"]
    assert trace.meta.path == str(rep)
    exported = Path(trace.meta.extra["nsys"]["exported_sqlite"])
    assert exported.parent == tmp_path / "cache" / "nsys-export"
    assert exported.is_file()
    (call,) = calls(fake_nsys)
    assert call.startswith("export --type sqlite") and call.endswith(str(rep))
    # Same content under another name: the cached export is reused, nsys is not run again.
    again = tmp_path / "copy.nsys-rep"
    again.write_bytes(rep.read_bytes())
    assert read_nsys_rep(again).gpu.height == 2
    assert len(calls(fake_nsys)) == 1
    # Different content: exported anew.
    other = tmp_path / "other"
    other.mkdir()
    read_nsys_rep(report(other, b"another report"))
    assert len(calls(fake_nsys)) == 2
    assert not list(exported.parent.glob("*.partial*"))


def test_dispatch_for_nsys_rep(tmp_path, fake_nsys):
    rep = report(tmp_path)
    assert sniff(rep) == "nsys-rep"
    assert read_any(rep).gpu.height == 2


def test_nsys_named_by_env(tmp_path, fake_nsys, monkeypatch):
    script = Path(os.environ["PATH"].split(os.pathsep)[0]) / "nsys"
    monkeypatch.setenv("PATH", str(tmp_path))  # not on PATH any more
    monkeypatch.setenv("NSYS", str(script))
    assert read_nsys_rep(report(tmp_path)).gpu.height == 2


def test_nsys_failure_is_one_line(tmp_path, fake_nsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_FAIL", "1")
    with pytest.raises(InputError) as info:
        read_nsys_rep(report(tmp_path))
    message = str(info.value)
    assert "nsys export failed (exit code 1)" in message
    assert "corrupted or truncated" in message and "\n" not in message
    assert not list((tmp_path / "cache" / "nsys-export").glob("*"))  # nothing cached


def test_without_nsys_says_how_to_export(tmp_path, no_nsys):
    with pytest.raises(InputError) as info:
        read_nsys_rep(report(tmp_path))
    message = str(info.value)
    assert "nsys export --type sqlite" in message and "$NSYS" in message
    assert "\n" not in message


def test_empty_report_with_nsys(tmp_path, fake_nsys):
    with pytest.raises(InputError, match="is empty"):
        read_nsys_rep(report(tmp_path, b""))
    assert calls(fake_nsys) == []


def test_empty_report_without_nsys(tmp_path, no_nsys):
    with pytest.raises(InputError, match="is empty"):
        read_nsys_rep(report(tmp_path, b""))


def test_missing_report(tmp_path, fake_nsys):
    with pytest.raises(InputError, match="cannot be read"):
        read_nsys_rep(tmp_path / "absent.nsys-rep")


def test_export_that_is_not_nsys_names_the_report(tmp_path, fake_nsys, monkeypatch):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    monkeypatch.setenv("FAKE_NSYS_SOURCE", str(junk))
    rep = report(tmp_path)
    with pytest.raises(InputError) as info:
        read_nsys_rep(rep)
    assert str(info.value).startswith(str(rep)) and "nsys export wrote" in str(info.value)
    # The junk is not kept: the next read exports again instead of reusing it.
    assert not list((tmp_path / "cache" / "nsys-export").iterdir())
    with pytest.raises(InputError):
        read_nsys_rep(rep)
    assert len(calls(fake_nsys)) == 2


def test_export_of_tables_not_nsys_is_not_reused(tmp_path, fake_nsys, monkeypatch):
    """SQLite with tables but not an export: refused by the reader, and dropped from the cache."""
    import sqlite3

    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    monkeypatch.setenv("FAKE_NSYS_SOURCE", str(other))
    rep = report(tmp_path)
    for _ in range(2):
        with pytest.raises(InputError, match="its SQLite export"):
            read_nsys_rep(rep)
    assert len(calls(fake_nsys)) == 2
    assert not list((tmp_path / "cache" / "nsys-export").iterdir())


def test_no_cache_exports_again(tmp_path, fake_nsys):
    rep = report(tmp_path)
    read_nsys_rep(rep)
    read_nsys_rep(rep)
    assert len(calls(fake_nsys)) == 1
    read_any(rep, use_cache=False)
    assert len(calls(fake_nsys)) == 2


def test_cached_junk_is_exported_again(tmp_path, fake_nsys):
    """A junk file under the cache key (an older version's, or a damaged disk) is not used."""
    rep = report(tmp_path)
    exported = Path(read_nsys_rep(rep).meta.extra["nsys"]["exported_sqlite"])
    exported.write_bytes(b"junk")
    assert read_nsys_rep(rep).gpu.height == 2
    assert len(calls(fake_nsys)) == 2


def test_export_that_never_returns_is_stopped(tmp_path, monkeypatch, capfd):
    """A hanging export is killed after $TRACEANALYZER_NSYS_TIMEOUT, with what it waited for."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    pidfile = tmp_path / "child.pid"
    script = bindir / "nsys"
    # The export starts a child of its own, as nsys does: both must end.
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nsleep 300\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEANALYZER_NSYS_TIMEOUT", "3")
    monkeypatch.setattr("traceanalyzer.ingest.nsys.rep.NOTICE_AFTER_S", 1.0)
    monkeypatch.setattr("traceanalyzer.ingest.nsys.rep.KILL_GRACE_S", 1)
    rep = report(tmp_path)
    with pytest.raises(InputError, match=r"did not finish in 3 s and was stopped"):
        read_nsys_rep(rep)
    assert "waiting for `nsys export` of run.nsys-rep" in capfd.readouterr().err
    child = int(pidfile.read_text())

    def ended() -> bool:
        try:
            return Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    # The export's pipes reach EOF when the child closes its files, which is early in its exit:
    # for a moment after that it is neither gone nor a zombie. It was signalled; let it finish.
    deadline = time.monotonic() + 2.0
    while not ended() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended()
    assert not list((tmp_path / "cache" / "nsys-export").iterdir())


@pytest.mark.parametrize("value", ["soon", "-1", "0", "nan"])
def test_bad_timeout_setting(tmp_path, fake_nsys, monkeypatch, value):
    from traceanalyzer.errors import UsageError

    monkeypatch.setenv("TRACEANALYZER_NSYS_TIMEOUT", value)
    with pytest.raises(UsageError, match="TRACEANALYZER_NSYS_TIMEOUT"):
        read_nsys_rep(report(tmp_path))


def test_nsys_env_naming_nothing_executable(tmp_path, no_nsys, monkeypatch):
    monkeypatch.setenv("NSYS", str(tmp_path / "no-such-nsys"))
    with pytest.raises(InputError, match=r"\$NSYS \(.*no-such-nsys\) is not an executable"):
        read_nsys_rep(report(tmp_path))
