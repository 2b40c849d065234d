"""Parquet cache of ingested traces, keyed by the trace's content.

A second analysis of a big trace reads five Parquet files instead of parsing gigabytes of JSON.
The key hashes the file's bytes (for files over ``FULL_HASH_LIMIT``, its size plus evenly spaced
samples, so keying a multi-GB trace costs milliseconds, not seconds) and ``CACHE_VERSION``, which
changes whenever ingest output changes. Entries are written to a temporary folder and renamed
into place, so a crash never leaves a half-written entry behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl

from traceanalyzer import demangle
from traceanalyzer.categories import KERNEL_PATTERNS
from traceanalyzer.model import FRAME_SCHEMAS, Trace, TraceMeta

#: Bump whenever an ingestor's output changes. Kernel categories are part of the key on their own
#: (see content_key), so editing a pattern never serves stale categories.
CACHE_VERSION = "5"  # 5: demangled names, gpu.mangled_name
FULL_HASH_LIMIT = 64 << 20
DEMANGLER_SOURCE = Path(demangle.__file__).read_bytes()
SAMPLE_COUNT = 256
SAMPLE_BYTES = 64 << 10
CACHE_DIR_NAME = ".traceanalyzer-cache"


def content_key(path: str | os.PathLike[str]) -> str:
    """A hex key that changes whenever the file's content does (see module doc for big files)."""
    h = hashlib.blake2b(digest_size=20)
    h.update(CACHE_VERSION.encode())
    h.update(repr(KERNEL_PATTERNS).encode())
    h.update(DEMANGLER_SOURCE)  # names are demangled at ingest: a demangler change is a new key
    size = os.path.getsize(path)
    h.update(str(size).encode())
    with open(path, "rb") as fh:
        if size <= FULL_HASH_LIMIT:
            for block in iter(lambda: fh.read(8 << 20), b""):
                h.update(block)
        else:
            step = (size - SAMPLE_BYTES) // (SAMPLE_COUNT - 1)
            for i in range(SAMPLE_COUNT):
                fh.seek(i * step)
                h.update(fh.read(SAMPLE_BYTES))
    return h.hexdigest()


def default_cache_dir(trace_path: str | os.PathLike[str]) -> Path:
    """``$TRACEANALYZER_CACHE_DIR``, else a folder next to the trace if writable, else the user's
    cache folder."""
    env = os.environ.get("TRACEANALYZER_CACHE_DIR")
    if env:
        return Path(env)
    beside = Path(trace_path).resolve().parent
    if os.access(beside, os.W_OK):
        return beside / CACHE_DIR_NAME
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "traceanalyzer"


def cached_read(path: str | os.PathLike[str], fmt: str,
                cache_dir: str | os.PathLike[str] | None = None) -> Trace:
    """Read ``path`` through the cache: load the entry if present, else ingest and store it."""
    from traceanalyzer.ingest import read_any

    root = Path(cache_dir) if cache_dir else default_cache_dir(path)
    entry = root / content_key(path)
    if (entry / "meta.json").exists():
        try:
            return _load_entry(entry, path)
        except (OSError, ValueError, pl.exceptions.PolarsError):
            shutil.rmtree(entry, ignore_errors=True)  # a damaged entry is rebuilt
    trace = read_any(path, fmt)
    if trace.meta.extra.get("changed_while_read"):  # the key hashed other bytes than were read
        return trace
    try:
        _store_entry(entry, trace)
    except OSError:
        pass  # a read-only or full disk only costs the speed-up
    return trace


def _load_entry(entry: Path, path: str | os.PathLike[str]) -> Trace:
    meta = TraceMeta.from_dict(json.loads((entry / "meta.json").read_text()))
    meta.path = str(path)
    frames = {name: pl.read_parquet(entry / f"{name}.parquet") for name in FRAME_SCHEMAS}
    trace = Trace(meta=meta, **frames)
    trace.validate()
    return trace


def _store_entry(entry: Path, trace: Trace) -> None:
    def write(tmp: Path) -> None:
        for name, frame in trace.frames().items():
            frame.write_parquet(tmp / f"{name}.parquet", compression="lz4", statistics=False)
        (tmp / "meta.json").write_text(json.dumps(trace.meta.to_dict()))

    publish_dir(entry, write)


def publish_dir(entry: Path, write: Callable[[Path], None]) -> None:
    """Create the folder ``entry`` whole or not at all: ``write`` fills a temporary folder
    beside it, which is then renamed, so readers never see a half-written cache entry."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        write(tmp)
        try:
            tmp.rename(entry)
        except OSError:
            if not entry.exists():  # lost a race with another process: theirs is as good
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
