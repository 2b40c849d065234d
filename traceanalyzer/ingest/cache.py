"""Parquet cache of ingested traces, keyed by the trace's content.

A second analysis of a big trace reads five Parquet files instead of parsing gigabytes of JSON.
The key hashes the file's bytes (for files over ``FULL_HASH_LIMIT``, its size plus evenly spaced
samples, so keying a multi-GB trace costs milliseconds, not seconds) and ``CACHE_VERSION``, which
changes whenever ingest output changes. Entries are written to a temporary folder and renamed
into place, so a crash never leaves a half-written entry behind.

Where: ``--cache-dir``, else ``$TRACEANALYZER_CACHE_DIR``, else the user's cache folder
(:func:`user_cache_dir`), never beside the trace: a team's shared trace folder stays as it was.
The folder holds three kinds of entry, each named by a content hash: ingested frames
(``<key>/``), analysis results (``results/<key>/``, :mod:`traceanalyzer.analysis.result_cache`)
and ``.nsys-rep`` exports (``nsys-export/<key>.sqlite``). Its size is bounded
(:data:`DEFAULT_MAX_BYTES`, or ``$TRACEANALYZER_CACHE_MAX``): after each store the least
recently used entries are deleted until the rest fit (:func:`prune`). A hit marks its entry as
used. Only entries of those three forms are ever deleted, so a cache folder named by mistake
(``--cache-dir ~``) loses nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from traceanalyzer import demangle
from traceanalyzer.categories import KERNEL_PATTERNS
from traceanalyzer.ingest.bounds import clean_meta
from traceanalyzer.model import FRAME_SCHEMAS, Trace, TraceMeta

#: Bump whenever an ingestor's output changes. Kernel categories are part of the key on their own
#: (see content_key), so editing a pattern never serves stale categories.
CACHE_VERSION = "6"  # 5: demangled names, gpu.mangled_name; 6: cpu.concrete_inputs, cpu.flops
FULL_HASH_LIMIT = 64 << 20
DEMANGLER_SOURCE = Path(demangle.__file__).read_bytes()
SAMPLE_COUNT = 256
SAMPLE_BYTES = 64 << 10
#: The cache's size bound when ``$TRACEANALYZER_CACHE_MAX`` does not name one: 5 GiB.
DEFAULT_MAX_BYTES = 5 << 30
CACHE_ENV = "TRACEANALYZER_CACHE_DIR"
MAX_ENV = "TRACEANALYZER_CACHE_MAX"
RESULTS_DIR = "results"
EXPORTS_DIR = "nsys-export"
_KEY = re.compile(r"[0-9a-f]{40}")
_EXPORT = re.compile(r"[0-9a-f]{64}\.sqlite")
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)


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


def user_cache_dir() -> Path:
    """The user's cache folder for traceanalyzer, by the platform's rule (XDG Base Directory on
    Linux: ``$XDG_CACHE_HOME/traceanalyzer`` when that is an absolute path, else
    ``~/.cache/traceanalyzer``; ``~/Library/Caches/traceanalyzer`` on macOS;
    ``%LOCALAPPDATA%\\traceanalyzer\\Cache`` on Windows)."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "traceanalyzer"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return Path(local or Path.home() / "AppData" / "Local") / "traceanalyzer" / "Cache"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # XDG: relative is invalid
    return base / "traceanalyzer"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``cache_dir``, else ``$TRACEANALYZER_CACHE_DIR``, else
    :func:`user_cache_dir`."""
    if cache_dir:
        return Path(cache_dir)
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else user_cache_dir()


def default_cache_dir(trace_path: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder used when none is named (kept for callers that pass the trace: the
    folder no longer depends on it)."""
    return cache_root(None)


def parse_size(text: str) -> int:
    """Bytes from ``5G``, ``500MiB``, ``2.5g``, ``1048576`` (binary units). Raises ValueError."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 5G, 500M, 1048576)")
    scale = 1 << (10 * " kmgt".index(m.group(2).lower() or " "))
    return int(float(m.group(1)) * scale)


def max_bytes() -> int:
    """The cache's size bound: ``$TRACEANALYZER_CACHE_MAX`` (e.g. ``20G``; ``0`` keeps nothing
    beyond the entry just written), else :data:`DEFAULT_MAX_BYTES`."""
    from traceanalyzer.errors import UsageError

    text = os.environ.get(MAX_ENV)
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(text)
    except ValueError as exc:
        raise UsageError(f"${MAX_ENV}: {exc}") from None


@dataclass(frozen=True)
class Entry:
    """One cache entry: its path, its kind (frames, result or export), bytes and last use."""

    path: Path
    kind: str
    size: int
    used: float


def entries(root: str | os.PathLike[str]) -> Iterator[Entry]:
    """The cache entries under ``root`` (only folders and files of the cache's own forms)."""
    base = Path(root)
    for folder, kind, pattern in ((base, "frames", _KEY), (base / RESULTS_DIR, "result", _KEY),
                                  (base / EXPORTS_DIR, "export", _EXPORT)):
        try:
            items = list(os.scandir(folder))
        except OSError:
            continue
        for item in items:
            if not pattern.fullmatch(item.name):
                continue
            try:
                st = item.stat(follow_symlinks=False)
                if item.is_symlink():
                    continue
                size = st.st_size if kind == "export" else _folder_size(Path(item.path))
            except OSError:
                continue  # removed meanwhile
            yield Entry(Path(item.path), kind, size, st.st_mtime)


def _folder_size(folder: Path) -> int:
    return sum(f.stat(follow_symlinks=False).st_size for f in os.scandir(folder)
               if f.is_file(follow_symlinks=False))


def touch(entry: Path) -> None:
    """Mark ``entry`` as just used (its modification time is its last use)."""
    try:
        os.utime(entry)
    except OSError:
        pass  # a read-only cache is still read


def remove(entry: Entry) -> None:
    if entry.kind == "export":
        entry.path.unlink(missing_ok=True)
    else:
        shutil.rmtree(entry.path, ignore_errors=True)


def prune(root: str | os.PathLike[str], limit: int | None = None,
          keep: Path | None = None) -> int:
    """Delete the least recently used entries under ``root`` until the rest take at most
    ``limit`` bytes (:func:`max_bytes` by default); ``keep`` (the entry just written) stays.
    Returns the bytes freed."""
    limit = max_bytes() if limit is None else limit
    found = sorted(entries(root), key=lambda e: e.used)
    total = sum(e.size for e in found)
    freed = 0
    for entry in found:
        if total <= limit:
            break
        if keep is not None and entry.path == keep:
            continue
        remove(entry)
        total -= entry.size
        freed += entry.size
    return freed


def clear(root: str | os.PathLike[str]) -> tuple[int, int]:
    """Delete every cache entry under ``root``; (entries, bytes) removed."""
    count = size = 0
    for entry in list(entries(root)):
        remove(entry)
        count += 1
        size += entry.size
    return count, size


def stored(root: Path, entry: Path) -> None:
    """After ``entry`` was written under ``root``: keep the cache within its bound."""
    try:
        prune(root, keep=entry)
    except OSError:
        pass


def cached_read(path: str | os.PathLike[str], fmt: str,
                cache_dir: str | os.PathLike[str] | None = None) -> Trace:
    """Read ``path`` through the cache: load the entry if present, else ingest and store it."""
    from traceanalyzer.ingest import read_any

    root = cache_root(cache_dir)
    entry = root / content_key(path)
    if (entry / "meta.json").exists():
        try:
            trace = _load_entry(entry, path)
            touch(entry)
            return trace
        except (OSError, ValueError, TypeError, KeyError, AttributeError,
                pl.exceptions.PolarsError):
            # A damaged entry (a meta.json that is not the object it should be, a Parquet
            # file cut short) is rebuilt, never fatal on every later run.
            shutil.rmtree(entry, ignore_errors=True)
    trace = read_any(path, fmt)
    if trace.meta.extra.get("changed_while_read"):  # the key hashed other bytes than were read
        return trace
    try:
        _store_entry(entry, trace)
    except OSError:
        return trace  # a read-only or full disk only costs the speed-up
    stored(root, entry)
    return trace


def _load_entry(entry: Path, path: str | os.PathLike[str]) -> Trace:
    data = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("devices", []), list) \
            or not all(isinstance(d, dict) for d in data.get("devices", [])) \
            or not isinstance(data.get("warnings", []), list) \
            or not isinstance(data.get("extra", {}), dict):
        raise ValueError("meta.json is not a trace's metadata")
    meta = TraceMeta.from_dict(data)
    meta.path = str(path)
    before = list(meta.warnings)
    clean_meta(meta)  # the same checks as a fresh read: the entry may be from elsewhere
    if meta.warnings != before:
        raise ValueError("meta.json holds values a fresh read would not")
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
