"""Read Perfetto protobuf traces (``.perfetto-trace``, ``.pftrace``, ``.pb``; gzipped or not).

The native reader needs no binary and no network: it streams the ``TracePacket`` records with the
``perfetto`` package's generated protos (:mod:`traceanalyzer.ingest.perfetto.decode`) and maps
tracks and TrackEvent slices to canonical frames (:mod:`traceanalyzer.ingest.perfetto.map`).
Producers whose data the native reader does not understand can go through trace_processor instead
(:mod:`traceanalyzer.ingest.perfetto.tp`), but only when the user names a binary.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO, Any

from traceanalyzer import ingest
from traceanalyzer.errors import InputError
from traceanalyzer.ingest.formats import TRACE_PROCESSOR_ENV
from traceanalyzer.model import Trace, TraceMeta

__all__ = ["TRACE_PROCESSOR_ENV", "read_perfetto", "read_perfetto_native"]


def read_perfetto(
    path: str | os.PathLike[str], *, trace_processor: str | os.PathLike[str] | None = None
) -> Trace:
    """Read a Perfetto protobuf trace into canonical frames.

    ``trace_processor`` (or the ``TRACEANALYZER_TRACE_PROCESSOR`` environment variable) names a
    ``trace_processor_shell`` binary to ingest through instead of the native reader. Nothing is
    ever downloaded: with no binary named, the native reader is used.
    """
    bin_path = trace_processor or os.environ.get(TRACE_PROCESSOR_ENV) or None
    if bin_path:
        from traceanalyzer.ingest.perfetto.tp import read_with_trace_processor

        return read_with_trace_processor(path, bin_path)
    return read_perfetto_native(path)


def read_perfetto_native(path: str | os.PathLike[str]) -> Trace:
    """Read ``path`` with the built-in streaming packet decoder."""
    from traceanalyzer.ingest.perfetto.decode import DecodeError, decode_stream
    from traceanalyzer.ingest.perfetto.map import to_trace

    p = Path(path)
    try:
        with open(p, "rb") as raw_fh:
            gzipped = raw_fh.read(2) == b"\x1f\x8b"
        if gzipped:
            # Every member's output is counted against what memory can take (the size trailer
            # gives only the last member's size, mod 2**32).
            with gzip.open(p, "rb") as gz:
                raw = decode_stream(_Bounded(gz, ingest.decoded_budget("perfetto")))
        else:
            with open(p, "rb") as fh:
                raw = decode_stream(fh)
    except _Bounded.TooMuch as exc:
        raise ingest.too_much_decoded(p, "perfetto", exc.args[0]) from None
    except DecodeError as exc:
        raise InputError(p, f"is not a Perfetto protobuf trace ({exc})") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(p, f"cannot be read ({exc})") from None
    if raw.packets == 0:
        raise InputError(p, "is not a Perfetto protobuf trace: no complete packet could be read")
    if raw.events.height == 0 and raw.tracks.height == 0 and raw.counters.height == 0:
        raise InputError(
            p,
            f"has {raw.packets} Perfetto packets but no track events, track descriptors or "
            "counters; for other data sources try --trace-processor",
        )
    meta = TraceMeta(path=str(p), source_format="perfetto", warnings=list(raw.warnings))
    meta.extra["perfetto_bytes"] = raw.bytes_read
    return to_trace(raw, meta)


class _Bounded:
    """A decompressing stream whose reads raise :class:`TooMuch` once more than ``limit`` bytes
    of it have been read."""

    class TooMuch(Exception):
        pass

    def __init__(self, fh: IO[bytes], limit: int | None) -> None:
        self.fh, self.limit, self.decoded = fh, limit, 0

    def _check(self, got: int) -> None:
        self.decoded += got
        if self.limit is not None and self.decoded > self.limit:
            raise _Bounded.TooMuch(self.limit)

    def read(self, size: int = -1) -> bytes:
        data = self.fh.read(size)
        self._check(len(data))
        return data

    def read1(self, size: int = -1) -> bytes:
        data: bytes = self.fh.read1(size)  # type: ignore[attr-defined]
        self._check(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        got: int = self.fh.readinto(buffer)  # type: ignore[attr-defined]
        self._check(got)
        return got

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        # A reader that reads the stream again from its start (the walker declined it) is not
        # charged twice: what is counted is how far into the stream it has read.
        self.decoded = self.fh.seek(offset, whence)
        return self.decoded

    def __getattr__(self, name: str) -> Any:  # tell, seekable, ...
        return getattr(self.fh, name)
