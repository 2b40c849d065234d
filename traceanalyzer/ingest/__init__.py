"""Ingest: turn a trace file of any supported format into a canonical :class:`Trace`.

Ingestors are the only code that reads trace files. Each one lives in its own module and exposes
one function, ``read_<format>(path) -> Trace``. :func:`load` picks the ingestor by sniffing the
file's first bytes (never by extension alone) and goes through the Parquet cache.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

from traceanalyzer.errors import InputError
from traceanalyzer.model import Trace

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
NSYS_REP_SUFFIX = ".nsys-rep"


def sniff(path: str | os.PathLike[str]) -> str:
    """Name the format of ``path``: "kineto", "nsys", "nsys-rep" or "perfetto".

    Raises :class:`InputError` for anything that is not a readable trace file.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(p, "is a directory, expected a trace file")
    if not p.exists():
        raise InputError(p, "no such file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise InputError(p, f"cannot be read ({exc.strerror or exc})") from None
    if p.name.endswith(NSYS_REP_SUFFIX):
        return "nsys-rep"
    if not head:
        raise InputError(p, "is empty")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC):
        try:
            with gzip.open(p, "rb") as fh:
                head = fh.read(64)
        except (OSError, EOFError, zlib.error) as exc:  # zlib.error: corrupt deflate data
            raise InputError(p, f"is not a valid gzip file ({exc})") from None
        if not head:
            raise InputError(p, "is an empty gzip file")
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if stripped[:1] in (b"{", b"["):
        return "kineto"
    if _looks_like_perfetto(head):
        return "perfetto"
    raise InputError(p, "is not a trace: expected Kineto/Chrome JSON, an Nsight Systems SQLite "
                        "export, an .nsys-rep or a Perfetto protobuf trace")


def _looks_like_perfetto(head: bytes) -> bool:
    # A Perfetto trace is a stream of `Trace.packet` fields: field 1, wire type 2 (tag byte 0x0a).
    return head[:1] == b"\x0a"


#: Peak memory of an analysis per byte of (uncompressed) input, plus the interpreter and
#: libraries. bench/RESULTS.md measures, at 1-2 GB, Kineto JSON at 0.7-0.8x for the ingest and
#: 1.3-1.4x for the whole `analyze`, an nsys export at 2.2-2.4x for the ingest. A Perfetto
#: protobuf file is far denser: the whole `analyze` of a 118 MB rocprofv3-like trace peaked at
#: 1.24 GB, 7.1x over this base (docs/perfetto.md). The margin is for traces unlike the
#: benchmark's (long names and stacks, few dropped events, many annotations).
MEMORY_PER_BYTE = {"kineto": 2.2, "nsys": 3.5, "perfetto": 12.0}
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
    trace = _read(path, fmt)
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
    if fmt == "kineto":
        from traceanalyzer.ingest.kineto import read_kineto

        return read_kineto(path)
    if fmt == "nsys":
        from traceanalyzer.ingest.nsys import read_nsys

        return read_nsys(path)
    if fmt == "nsys-rep":
        from traceanalyzer.ingest.nsys import read_nsys_rep

        return read_nsys_rep(path)
    if fmt == "perfetto":
        from traceanalyzer.ingest.perfetto import read_perfetto

        return read_perfetto(path)
    raise InputError(path, f"unknown format {fmt!r}")


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
    if fmt == "perfetto" and (trace_processor or os.environ.get("TRACEANALYZER_TRACE_PROCESSOR")):
        from traceanalyzer.ingest.perfetto import read_perfetto

        return read_perfetto(path, trace_processor=trace_processor)
    if not use_cache:
        return read_any(path, fmt)
    from traceanalyzer.ingest.cache import cached_read

    return cached_read(path, fmt, cache_dir=cache_dir)
