"""The registry of formats: the one list that sniffing, reading, the memory check and the result
cache's code hash use."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from traceanalyzer import ingest
from traceanalyzer.errors import InputError
from traceanalyzer.ingest import formats
from traceanalyzer.ingest.formats import FORMATS


def test_every_format_has_a_reader_and_a_package():
    for fmt in FORMATS.values():
        module, _, function = fmt.reader.partition(":")
        assert callable(getattr(__import__(module, fromlist=[function]), function)), fmt.name
        assert fmt.source_dirs() and all(d.is_dir() for d in fmt.source_dirs()), fmt.name
        assert fmt.suffix or fmt.magic or fmt.looks_like, f"{fmt.name} cannot be sniffed"


def test_memory_ratios_come_from_the_registry():
    assert ingest.MEMORY_PER_BYTE == {"kineto": 2.2, "nsys": 3.5, "perfetto": 12.0}
    assert "nsys-rep" not in ingest.MEMORY_PER_BYTE  # an export's size is unknown beforehand


def test_a_file_of_no_format_lists_every_format(tmp_path: Path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(InputError) as info:
        ingest.sniff(path)
    assert str(info.value).endswith(
        "is not a trace: expected Kineto/Chrome JSON, an Nsight Systems SQLite export, an "
        ".nsys-rep, a Perfetto protobuf trace, an Nsight Compute report (.ncu-rep, plain or gzipped) "
        "or an Nsight Compute CSV page")


@pytest.mark.parametrize(("head", "name"), [
    (b'{"traceEvents": []}', "kineto"),
    (b"\n  [", "kineto"),  # a newline first: JSON, though a packet stream starts with 0x0a too
    (b"\x0a\x04\x08\x01\x10\x02", "perfetto"),
    (b"SQLite format 3\x00" + bytes(84), "nsys"),
])
def test_sniffing_tries_the_formats_in_registry_order(tmp_path: Path, head: bytes, name: str):
    path = tmp_path / "trace.bin"
    path.write_bytes(head)
    assert ingest.sniff(path) == name
    (tmp_path / "r.nsys-rep").write_bytes(head)  # the suffix decides before the bytes
    assert ingest.sniff(tmp_path / "r.nsys-rep") == "nsys-rep"


def test_only_a_named_program_reads_externally(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(formats.TRACE_PROCESSOR_ENV, raising=False)
    assert not FORMATS["perfetto"].reads_externally()
    assert FORMATS["perfetto"].reads_externally("/opt/trace_processor_shell")
    monkeypatch.setenv(formats.TRACE_PROCESSOR_ENV, "/opt/trace_processor_shell")
    assert FORMATS["perfetto"].reads_externally()
    assert not FORMATS["kineto"].reads_externally("/opt/trace_processor_shell")


def test_the_registry_names_every_ingest_source_file():
    """A folder of ingest code that no format names would be left out of the code hash."""
    every = {f for suffix in formats.SOURCE_SUFFIXES for f in formats.INGEST_DIR.rglob(f"*{suffix}")}
    assert every == set(formats.ingest_sources())
    suffixes = {f.suffix for f in every}
    assert {".py", ".c", ".h"} <= suffixes


def _package_copy(tmp_path: Path) -> Path:
    package = Path(ingest.__file__).resolve().parents[1]
    copy = tmp_path / "traceanalyzer"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return copy


def test_code_hash_covers_c_headers(tmp_path: Path):
    """Editing a header (``_regexlite.h`` classifies kernels) or adding one must change the hash,
    so that the result cache serves no result the old code made."""
    from traceanalyzer.analysis.result_cache import source_hash

    package = _package_copy(tmp_path)
    before = source_hash(package)
    assert source_hash(package) == before
    header = package / "ingest" / "_native" / "_regexlite.h"
    header.write_bytes(header.read_bytes() + b"\n/* an edit */\n")
    edited = source_hash(package)
    assert edited != before
    (package / "ingest" / "kineto" / "_native" / "_new.h").write_text("/* a new header */\n")
    assert source_hash(package) not in (before, edited)


@pytest.mark.parametrize("where", ["ingest/perfetto/map.py", "ingest/kineto/_native/_eventdecode.c",
                                   "ingest/cache.py", "model.py"])
def test_code_hash_covers_every_kind_of_source(tmp_path: Path, where: str):
    from traceanalyzer.analysis.result_cache import source_hash

    package = _package_copy(tmp_path)
    before = source_hash(package)
    path = package / where
    assert path.is_file()
    path.write_bytes(path.read_bytes() + b"\n")
    assert source_hash(package) != before
