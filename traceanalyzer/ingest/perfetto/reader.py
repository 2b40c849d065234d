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
        opener = gzip.open if gzipped else open
        with opener(p, "rb") as fh:
            raw = decode_stream(fh)
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
