"""Kineto / Chrome JSON traces (PyTorch profiler, NVIDIA CUPTI and AMD ROCm) into canonical frames.

The pipeline, a module per stage:

1. :mod:`.jsonscan` cuts the event array into chunks (runs of events as the file holds them, or
   NDJSON), without parsing it;
2. :mod:`.decode` decodes each chunk with an explicit schema (:mod:`.schema`) in C (Polars'
   NDJSON reader without it), so only the fields analyses use are ever materialised and
   ``args`` stays unparsed apart from them;
3. :mod:`.reduce` reduces each decoded chunk to the rows and columns of the canonical frames, on
   the decoding thread, so decoded chunks never pile up;
4. :mod:`.assemble` builds the frames from those (joins, deduplication, sorting).

The top-level metadata is read by :mod:`.metadata`; gzip through :mod:`.gzipstream`.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl
import polars.selectors as cs

from traceanalyzer import ingest
from traceanalyzer.errors import InputError
from traceanalyzer.ingest.kineto import decode, reduce
from traceanalyzer.ingest.kineto.assemble import assemble
from traceanalyzer.ingest.kineto.gzipstream import INFLATE_ERRORS, TooMuchDecoded, open_trace
from traceanalyzer.ingest.kineto.jsonscan import (
    DEFAULT_CHUNK_BYTES,
    EventRun,
    NotATrace,
    ScanResult,
    cut_long_strings,
    iter_ndjson_chunks,
)
from traceanalyzer.ingest.kineto.metadata import read_metadata
from traceanalyzer.ingest.kineto.reduce import Parts, Reduced, compiled_parts, kept, reduce_frame
from traceanalyzer.ingest.kineto.schema import EVENT_SCHEMA, KEPT_PHASES
from traceanalyzer.ingest.textcap import MAX_TEXT_CHARS
from traceanalyzer.model import Trace

#: Worker threads, and the chunks (and groups) decoding (and reducing) at once: the C decoder and
#: most of the reduction's Polars calls run without the GIL, and a third worker fills the gaps
#: while one holds it (bench/NOTES.md, round 4).
DECODE_THREADS = 3
GROUP_BYTES = 8 << 20  # trace bytes per reduction (see _decode_events)
#: ... and for the first: a trace up to this size is one group, reduced once and assembled in C
#: (a larger first group keeps 20-50 MB traces off the slower Polars assembly: bench/NOTES.md,
#: round 15).
FIRST_GROUP_BYTES = 64 << 20
IN_FLIGHT_BYTES = DECODE_THREADS * DEFAULT_CHUNK_BYTES  # chunks decoding at once, in trace bytes
#: JSON text kept of a string for the decoders that materialise strings whole: enough for the
#: cap's characters plus one at 12 bytes each (a surrogate pair's two ``\\u`` escapes), and one
#: character for the cut (which backs up to a boundary).
FALLBACK_STRING_BYTES = 12 * (MAX_TEXT_CHARS + 2)
ARENA_PER_BYTE = 1.25  # decoded bytes a chunk's arena holds, per byte of trace (~0.75 used)


def read_kineto(path: str | os.PathLike[str]) -> Trace:
    """Read a Kineto/Chrome JSON trace (``.json`` or ``.json.gz``) into canonical frames."""
    path = Path(path)
    scan = ScanResult()
    read_twice = False
    # What is decompressed is counted against what memory can take, whatever the size trailer
    # said (several members, or a size beyond 4 GiB, which the trailer holds mod 2**32).
    budget = ingest.decoded_budget("kineto")
    try:
        try:
            with open_trace(path, budget) as stream:
                events = _decode_events(stream, scan, path, by_layout=True)
        except _LayoutMismatch:
            # A piece cut by the events' layout was not whole events: read the file again
            # with the structural scan alone, which any valid JSON satisfies.
            scan, read_twice = ScanResult(), True
            with open_trace(path, budget) as stream:
                events = _decode_events(stream, scan, path, by_layout=False)
    except TooMuchDecoded as exc:
        raise ingest.too_much_decoded(path, "kineto", exc.limit) from None
    except NotATrace as exc:
        raise InputError(path, str(exc)) from None
    except (OSError, EOFError, *INFLATE_ERRORS) as exc:
        raise InputError(path, f"cannot be decompressed or read ({exc})") from None
    meta = read_metadata(path, scan)
    if read_twice:  # correct either way, but twice the time: the tests watch for it
        meta.extra["read_twice"] = True
    return assemble(events, meta)


_threads: ThreadPoolExecutor | None = None


class _Tasks:
    """One read's tasks on the decoding threads, which the process keeps for its later reads.

    Starting the threads for each read was a measurable part of a small trace's read
    (bench/NOTES.md, round 8), and a batch worker reads trace after trace. On the way out, as a
    pool of the read's own would, this cancels the read's tasks that have not started and waits
    for the others.
    """

    def __init__(self) -> None:
        global _threads
        if _threads is None:
            _threads = ThreadPoolExecutor(max_workers=DECODE_THREADS, thread_name_prefix="ndjson")
        self.pool = _threads
        self.futures: list[Future[Any]] = []

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        # Only the tasks still running are kept: a finished one holds its result (a decoded
        # chunk), which the read lets go of once it has taken it.
        self.futures = [f for f in self.futures if not f.done()]
        future = self.pool.submit(fn, *args)
        self.futures.append(future)
        return future

    def __enter__(self) -> _Tasks:
        return self

    def __exit__(self, *exc: object) -> None:
        for future in self.futures:
            future.cancel()
        wait(self.futures)


class _LayoutMismatch(Exception):
    """A chunk split by the learned line layout does not decode as one event per line."""


def _decode_events(stream: BinaryIO, scan: ScanResult, path: Path,
                   by_layout: bool) -> list[Parts | Reduced]:
    # Each chunk decodes (and, compiled, reduces) on one of DECODE_THREADS threads, without the
    # GIL, while this thread cuts the next ones. Chunks are then joined in groups of up to
    # GROUP_BYTES of trace, text as categories when there are several groups: a Polars step has
    # a fixed cost that chunk-sized steps paid hundreds of times per GB (bench/NOTES.md, round 4),
    # and a trace below FIRST_GROUP_BYTES pays it once. At most IN_FLIGHT_BYTES of chunks decode and
    # DECODE_THREADS groups are joined at a time, which bounds memory. (A bound in bytes, not in
    # chunks: with a count of three, the last piece of a 10 MB trace, after three 4 MB chunks,
    # went on only when the first of them was done, and then decoded alone at the end.)
    decoding: deque[tuple[int, Future[pl.DataFrame | Reduced]]] = deque()
    reducing: deque[Future[Parts | Reduced]] = deque()
    parts: list[Parts | Reduced] = []
    group: list[pl.DataFrame | Reduced] = []
    group_bytes = groups = decoding_bytes = 0

    def take_decoded(in_flight_bytes: int) -> None:
        """Group the decoded chunks, in order, until at most ``in_flight_bytes`` of chunks are
        still decoding."""
        nonlocal group, group_bytes, groups, decoding_bytes
        while decoding and (decoding_bytes > in_flight_bytes or decoding[0][1].done()):
            size, frame = decoding.popleft()
            decoding_bytes -= size
            group.append(frame.result())
            group_bytes += size
            if group_bytes >= (GROUP_BYTES if groups else FIRST_GROUP_BYTES):
                reducing.append(pool.submit(_reduce_group, group, True))
                group, group_bytes, groups = [], 0, groups + 1
        while len(reducing) > DECODE_THREADS:
            parts.append(reducing.popleft().result())

    with _Tasks() as pool:
        for n, chunk in enumerate(_chunks_until_damage(stream, scan, by_layout)):
            # The first chunk on each thread in huge pages: see _native/_eventdecode.c's arena_bytes.
            arena = ARENA_PER_BYTE * len(chunk) if n < DECODE_THREADS else 0
            decoding.append((len(chunk), pool.submit(_decode_chunk, chunk, scan, int(arena))))
            decoding_bytes += len(chunk)
            del chunk  # the decoder holds the bytes until it is done with them
            take_decoded(IN_FLIGHT_BYTES)
        take_decoded(0)
        if group:  # the only group needs no categories: nothing piles up beside it
            reducing.append(pool.submit(_reduce_group, group, groups > 0))
        parts.extend(f.result() for f in reducing)
    if getattr(stream, "truncated", False):
        scan.warnings.append("the gzip stream ends early; kept the events it holds")
    return parts or [reduce_frame(pl.DataFrame(schema=EVENT_SCHEMA))]


def _reduce_group(chunks: list[pl.DataFrame | Reduced], compact: bool) -> Parts | Reduced:
    # Reduced right away to what the canonical frames take, so decoded chunks never pile up.
    # A chunk the compiled reduction took arrives reduced; the others are decoded events.
    if all(isinstance(c, pl.DataFrame) for c in chunks):
        return reduce_frame(pl.concat(chunks) if len(chunks) > 1 else chunks[0], compact)
    if all(isinstance(c, Reduced) for c in chunks):  # one frame per table for the whole group
        joined = Reduced.join(chunks)
        if not compact:  # the trace's only group: see assemble
            return joined
        parts = [compiled_parts(*joined)]
    else:
        parts = [compiled_parts(*c) if isinstance(c, Reduced) else reduce_frame(c) for c in chunks]
    frames = []
    for name in Parts.TABLES:
        frame = pl.concat([getattr(p, name) for p in parts], rechunk=False)
        if compact and name in ("cpu", "gpu"):  # as reduce_frame does: see _as_categories
            frame = frame.with_columns(cs.string().cast(pl.Categorical))
        frames.append(frame)
    return Parts(sum(p.untimed for p in parts), sum(p.negative for p in parts), frames)


def _chunks_until_damage(stream: BinaryIO, scan: ScanResult,
                         by_layout: bool) -> Iterator[bytes | EventRun]:
    """Yield NDJSON chunks; a gzip stream cut short counts as truncation, not as an error."""
    try:
        yield from iter_ndjson_chunks(stream, scan, keep_phases="".join(KEPT_PHASES).encode(),
                                      by_layout=by_layout,
                                      raw_runs=by_layout and decode.AVAILABLE)
    except (EOFError, gzip.BadGzipFile, *INFLATE_ERRORS) as exc:
        if not scan.found_events_array:
            raise
        scan.truncated = True
        scan.warnings.append(f"compressed stream ends early ({exc}); kept the events read so far")


def _decode_chunk(chunk: bytes | EventRun, scan: ScanResult,
                  arena_bytes: int = 0) -> pl.DataFrame | Reduced:
    """A chunk's events, reduced already when the compiled reduction takes them."""
    run = isinstance(chunk, EventRun)
    raw = decode.decode_raw(chunk.data if run else chunk, EVENT_SCHEMA,
                            keep=("ph", KEPT_PHASES), arena_bytes=arena_bytes)
    if raw is not None:
        reduced = reduce.reduce_raw(raw)
        return decode.to_frame(raw, EVENT_SCHEMA) if reduced is None else reduced
    if run:  # events cut by the learned layout: a run the decoder declines may be cut wrong
        raise _LayoutMismatch
    # Polars and the standard library materialise each string whole: one 20 MB name took them
    # 10 times its size. Cut first, to more text than the cap keeps (textcap.cap_text cuts it).
    chunk, _ = cut_long_strings(chunk, FALLBACK_STRING_BYTES)
    try:  # no compiled decoder, or a chunk it leaves to Polars
        return kept(pl.read_ndjson(io.BytesIO(chunk), schema=EVENT_SCHEMA, ignore_errors=True))
    except pl.exceptions.PolarsError:
        if scan.split_by_layout:
            raise _LayoutMismatch from None
        return kept(_decode_chunk_slowly(chunk, scan))


def _decode_chunk_slowly(chunk: bytes, scan: ScanResult) -> pl.DataFrame:
    """Decode a chunk the fast reader rejects (NaN/Infinity literals, huge numbers, bad UTF-8).

    Rare, so a per-line pass is acceptable here: each line is parsed with the standard library,
    non-finite numbers and integers beyond int64 become null, and lines that are not JSON at all
    are dropped with a warning.
    """
    clean: list[bytes] = []
    dropped = 0
    for line in chunk.split(b"\n"):
        if not line.strip():
            continue
        try:
            event = json.loads(line.decode("utf-8", errors="replace"),
                               parse_constant=lambda _c: _NON_FINITE, parse_int=_bounded_int,
                               parse_float=_finite_float)
            if not isinstance(event, dict):
                dropped += 1
                continue
            if event.get("dur") is _NON_FINITE:  # NaN/Infinity: counted as unusable, not missing
                event["dur"] = _UNUSABLE_DUR
            clean.append(_utf8(json.dumps(event, allow_nan=False, default=_as_null,
                                          ensure_ascii=False)))
        except (ValueError, RecursionError):  # RecursionError: args nested thousands deep
            dropped += 1
    if dropped:
        scan.warnings.append(f"skipped {dropped} malformed events")
    if not clean:
        return pl.DataFrame(schema=EVENT_SCHEMA)
    return pl.read_ndjson(io.BytesIO(b"\n".join(clean)), schema=EVENT_SCHEMA, ignore_errors=True)


def _utf8(text: str) -> bytes:
    """UTF-8 of text whose lone surrogates (JSON's "\\udbd4" alone) become U+FFFD, as bad bytes
    do: escaped, Polars' reader refuses them, and the whole chunk with them."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode()


#: NaN, Infinity and floats beyond float64 (``1e400``) in the slow path: null, except as a
#: duration, which becomes _UNUSABLE_DUR so that the reduction counts it (reduce._dur_ns).
_NON_FINITE = object()
_UNUSABLE_DUR = 1e300


def _finite_float(text: str) -> object:
    value = float(text)
    return value if math.isfinite(value) else _NON_FINITE


def _as_null(value: object) -> object:
    return None if value is _NON_FINITE else str(value)


def _bounded_int(text: str) -> int | None:
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None
