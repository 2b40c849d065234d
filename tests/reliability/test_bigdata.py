"""Big inputs: a trace that cannot fit in memory stops up front with a one-line message and exit
code 2, instead of being killed by the OOM killer without a word.

The 3-5 GB end-to-end measurement is a manual run (docs/reliability.md); here the check itself is
tested with sparse files (no disk or memory used) and a patched memory figure.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from traceanalyzer import ingest
from traceanalyzer.errors import InputError

HEADER = b'{"schemaVersion": 1, "traceEvents": ['


def sparse(path: Path, size: int, head: bytes = HEADER) -> Path:
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return path


def test_too_big_for_memory_stops_with_one_line(tmp_path: Path) -> None:
    available = ingest.available_memory()
    if available is None:
        pytest.skip("no /proc/meminfo")
    size = int(available / ingest.MEMORY_PER_BYTE["kineto"]) + (1 << 30)
    try:
        trace = sparse(tmp_path / "huge.json", size)
    except OSError:
        pytest.skip("cannot make a sparse file here")
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", "analyze", str(trace), "--no-cache", "--json",
         str(out)], capture_output=True, text=True, timeout=120, cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != ingest.NO_MEMORY_CHECK_ENV})
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(trace) in line and "memory" in line and "GiB" in line
    assert ingest.NO_MEMORY_CHECK_ENV in line
    assert not out.exists()


def test_check_memory_uses_the_format_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = sparse(tmp_path / "t.json", 100 << 20)
    monkeypatch.delenv(ingest.NO_MEMORY_CHECK_ENV, raising=False)
    monkeypatch.setattr(ingest, "available_memory", lambda: ingest.BASE_MEMORY + (150 << 20))
    with pytest.raises(InputError, match="memory"):
        ingest.check_memory(trace, "kineto")  # needs 220 MB on top of the base
    monkeypatch.setattr(ingest, "available_memory", lambda: ingest.BASE_MEMORY + (300 << 20))
    ingest.check_memory(trace, "kineto")
    with pytest.raises(InputError, match="perfetto"):  # 12x: 1.2 GB on top of the base
        ingest.check_memory(trace, "perfetto")
    monkeypatch.setattr(ingest, "available_memory", lambda: 1)
    ingest.check_memory(trace, "nsys-rep")  # no measured ratio (its export's size is unknown)
    monkeypatch.setenv(ingest.NO_MEMORY_CHECK_ENV, "1")
    ingest.check_memory(trace, "kineto")


def test_memory_check_never_blocks_small_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny gzip (which compresses to more than its input) is not taken for a 4 GiB one."""
    small = tmp_path / "s.json.gz"
    small.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert ingest.input_size(small) == len(b'{"traceEvents": []}')
    monkeypatch.setattr(ingest, "available_memory", lambda: ingest.BASE_MEMORY + (1 << 20))
    ingest.check_memory(small, "kineto")


def test_input_size_of_gzip_is_uncompressed(tmp_path: Path) -> None:
    data = b'{"traceEvents": [' + b'{"ph": "X", "ts": 1},' * 50_000 + b"{}]}"
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(data))
    assert ingest.input_size(gz) == len(data)
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    assert ingest.input_size(plain) == len(data)


def test_available_memory_is_plausible() -> None:
    available = ingest.available_memory()
    if available is None:
        pytest.skip("no /proc/meminfo")
    assert 0 < available < 1 << 50


def test_cached_trace_is_not_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading from the Parquet cache needs far less memory than parsing: no check then."""
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, '
                     '"tid": 7, "ts": 1, "dur": 2}]}')
    cache = tmp_path / "cache"
    ingest.load(trace, cache_dir=cache)
    monkeypatch.setattr(ingest, "available_memory", lambda: 1)
    monkeypatch.delenv(ingest.NO_MEMORY_CHECK_ENV, raising=False)
    assert ingest.load(trace, cache_dir=cache).gpu.height == 1
    with pytest.raises(InputError, match="memory"):
        ingest.load(trace, use_cache=False)
