"""Gzipped Nsight Systems exports: recognised by content, read as the plain file, errors named
after the file the user gave."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from tests.support.paths import SAMPLES
from traceanalyzer.errors import InputError
from traceanalyzer.ingest import read_any, sniff, unpack

PLAIN = SAMPLES / "nsys" / "hidden_sync_bad.sqlite"


def _gzipped(src: Path, dst: Path) -> Path:
    with open(src, "rb") as fin, gzip.open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    return dst


def test_gzipped_export_reads_as_the_plain_file(tmp_path):
    packed = _gzipped(PLAIN, tmp_path / "run.sqlite.gz")
    assert sniff(packed) == "nsys"
    plain, unpacked = read_any(PLAIN), read_any(packed)
    assert unpacked.meta.path == str(packed)
    for name in ("gpu", "cpu", "annotations"):
        assert getattr(unpacked, name).equals(getattr(plain, name)), name
    assert not list(Path(unpack.tempfile.gettempdir()).glob("traceanalyzer-*.sqlite"))


def test_any_name_is_recognised_by_content(tmp_path):
    packed = _gzipped(PLAIN, tmp_path / "export.bin")
    assert sniff(packed) == "nsys"
    assert read_any(packed).gpu.height == read_any(PLAIN).gpu.height


def test_a_cut_gzip_export_is_one_line_error_naming_the_file(tmp_path):
    packed = _gzipped(PLAIN, tmp_path / "cut.sqlite.gz")
    data = packed.read_bytes()
    packed.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        read_any(packed, "nsys")
    assert err.value.path == str(packed)
    assert "\n" not in str(err.value)


def test_a_gzipped_sqlite_that_is_no_export_names_the_file(tmp_path):
    import sqlite3

    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    packed = _gzipped(db, tmp_path / "other.sqlite.gz")
    with pytest.raises(InputError, match="not an Nsight Systems export") as err:
        read_any(packed)
    assert err.value.path == str(packed)


def test_unpacking_stops_before_the_disk_fills(tmp_path, monkeypatch):
    packed = _gzipped(PLAIN, tmp_path / "big.sqlite.gz")
    free = shutil.disk_usage(unpack.tempfile.gettempdir()).free
    monkeypatch.setattr(unpack, "DISK_MARGIN", free - 1000)  # room for 1,000 bytes only
    with pytest.raises(InputError, match="free in") as err:
        read_any(packed, "nsys")
    assert err.value.path == str(packed)
    assert not list(Path(unpack.tempfile.gettempdir()).glob("traceanalyzer-*.sqlite"))
