"""Ingest: turn a trace file of any supported format into a canonical :class:`Trace`.

Ingestors are the only code that reads trace files. Each format is a package (``kineto/``,
``nsys/``, ``perfetto/``) that exposes ``read_<format>(path) -> Trace``, and an entry of the
registry in :mod:`.formats`. :func:`load` picks the ingestor by sniffing the file's first bytes
(never by extension alone) and goes through the Parquet cache (:mod:`.cache`).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.bounds import check_trace
from traceanalyzer.ingest.formats import FORMATS, GZIP_MAGIC, expected
from traceanalyzer.model import Trace

__all__ = ["load", "read_any", "sniff", "check_memory", "available_memory", "input_size",
           "MEMORY_PER_BYTE", "BASE_MEMORY", "NO_MEMORY_CHECK_ENV"]


def sniff(path: str | os.PathLike[str]) -> str:
    """Name the format of ``path`` (a key of :data:`~traceanalyzer.ingest.formats.FORMATS`:
    "kineto", "nsys", "nsys-rep" or "perfetto").

    Raises :class:`InputError` for anything that is not a readable trace file.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(p, "is a directory, expected a trace file")
    if not p.exists():
        raise InputError(p, "no such file")
    kind = _special_kind(p)
    if kind:  # opening a FIFO blocks until a writer comes: refuse before any open
        raise InputError(p, f"is {kind}, not a regular file: expected a trace file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise InputError(p, f"cannot be read ({exc.strerror or exc})") from None
    for fmt in FORMATS.values():
        if fmt.suffix is not None and p.name.endswith(fmt.suffix):
            return fmt.name
    if not head:
        raise InputError(p, "is empty")
    for fmt in FORMATS.values():
        if fmt.magic is not None and head.startswith(fmt.magic):
            return fmt.name
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(p, "rb") as fh:
                head = fh.read(64)
        except (OSError, EOFError, zlib.error) as exc:  # zlib.error: corrupt deflate data
            raise InputError(p, f"is not a valid gzip file ({exc})") from None
        if not head:
            raise InputError(p, "is an empty gzip file")
    for fmt in FORMATS.values():
        if fmt.looks_like is not None and fmt.looks_like(head):
            return fmt.name
    raise InputError(p, f"is not a trace: expected {expected()}")


def _special_kind(path: Path) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (a FIFO, a device)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # the open below says what is wrong
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"


#: Peak memory of an analysis per byte of (uncompressed) input, plus the interpreter and
#: libraries (:data:`BASE_MEMORY`): each format's measured ratio with a margin
#: (:mod:`.formats`).
MEMORY_PER_BYTE = {f.name: f.memory_per_byte for f in FORMATS.values()
                   if f.memory_per_byte is not None}
BASE_MEMORY = 400 << 20
NO_MEMORY_CHECK_ENV = "TRACEANALYZER_NO_MEMORY_CHECK"


def check_memory(path: str | os.PathLike[str], fmt: str) -> None:
    """Stop with a message before an ingest that cannot fit in memory: the OOM killer would end
    the process without a word. Set $TRACEANALYZER_NO_MEMORY_CHECK=1 to try anyway."""
    ratio = MEMORY_PER_BYTE.get(fmt)
    available = available_memory()
    if ratio is None or available is None or os.environ.get(NO_MEMORY_CHECK_ENV):
        return
    size = input_size(path)
    need = BASE_MEMORY + int(size * ratio)
    if need > available:
        raise InputError(path, f"needs about {need / 2**30:.1f} GiB of memory to read "
                               f"({size / 2**30:.1f} GiB of {fmt} data) and only "
                               f"{available / 2**30:.1f} GiB is available; run it on a machine "
                               "with more memory, or record a shorter trace (fewer steps); set "
                               f"{NO_MEMORY_CHECK_ENV}=1 to try anyway")


def available_memory() -> int | None:
    """Bytes this process can still use: MemAvailable, or less under a cgroup memory limit."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def input_size(path: str | os.PathLike[str]) -> int:
    """Size of the data an ingestor will decode: a gzip file's uncompressed size."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        if fh.read(2) != GZIP_MAGIC or size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    # The trailer holds the size mod 2**32. A file under 200 MB holds under 4 GiB of JSON (it
    # compresses less than 20x); above that, assume it compresses at least 3x.
    while size * 20 >= 1 << 32 and isize < 3 * size:
        isize += 1 << 32
    return isize


def read_any(path: str | os.PathLike[str], fmt: str | None = None) -> Trace:
    """Read ``path`` with the ingestor for its format, bypassing the cache.

    A file whose size or modification time differs after the read from before it (cut
    shorter, still being written, or overwritten) is analyzed as the read saw it, with a
    warning, and flagged in ``meta.extra["changed_while_read"]`` so that the cache does not
    keep it.
    """
    fmt = fmt or sniff(path)
    check_memory(path, fmt)
    before = _file_state(path)
    trace = check_trace(_read(path, fmt))
    after = _file_state(path)
    if after != before:
        if after[0] < 0:
            how = "removed"
        elif after[0] != before[0]:
            how = f"{before[0]:,} -> {after[0]:,} bytes"
        else:
            how = f"rewritten, {after[0]:,} bytes"
        trace.meta.warnings.append(f"the file changed while it was being read ({how}); "
                                   "analyzed what the read saw")
        trace.meta.extra["changed_while_read"] = True
    return trace


def _read(path: str | os.PathLike[str], fmt: str) -> Trace:
    spec = FORMATS.get(fmt)
    if spec is None:
        raise InputError(path, f"unknown format {fmt!r}")
    return spec.read(path)


def _file_state(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Size and modification time (ns) of ``path``; (-1, -1) once it is gone."""
    try:
        st = os.stat(path)
    except OSError:  # gone by now: whatever was read stands
        return -1, -1
    return st.st_size, st.st_mtime_ns


def load(
    path: str | os.PathLike[str],
    *,
    use_cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    trace_processor: str | os.PathLike[str] | None = None,
) -> Trace:
    """Read a trace in any supported format into canonical frames, through the Parquet cache.

    ``trace_processor`` (or ``$TRACEANALYZER_TRACE_PROCESSOR``) names a Perfetto
    ``trace_processor_shell`` to read Perfetto traces with; such reads bypass the cache, whose
    entries hold what the built-in reader made.
    """
    fmt = sniff(path)
    if FORMATS[fmt].reads_externally(trace_processor):
        return check_trace(FORMATS[fmt].read(path, trace_processor=trace_processor))
    if not use_cache:
        return read_any(path, fmt)
    from traceanalyzer.ingest.cache import cached_read

    return cached_read(path, fmt, cache_dir=cache_dir)
