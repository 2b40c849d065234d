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


def read_any(path: str | os.PathLike[str], fmt: str | None = None) -> Trace:
    """Read ``path`` with the ingestor for its format, bypassing the cache."""
    fmt = fmt or sniff(path)
    if fmt == "kineto":
        from traceanalyzer.ingest.kineto import read_kineto

        return read_kineto(path)
    if fmt == "nsys":
        from traceanalyzer.ingest.nsys import read_nsys

        return read_nsys(path)
    if fmt == "nsys-rep":
        from traceanalyzer.ingest.nsys_rep import read_nsys_rep

        return read_nsys_rep(path)
    if fmt == "perfetto":
        from traceanalyzer.ingest.perfetto import read_perfetto

        return read_perfetto(path)
    raise InputError(path, f"unknown format {fmt!r}")


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
