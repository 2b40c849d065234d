"""Kineto / Chrome JSON traces (PyTorch profiler, NVIDIA CUPTI and AMD ROCm) into canonical frames.

The event array is cut into chunks by :mod:`traceanalyzer.ingest.jsonscan` (runs of events as the
file holds them, or NDJSON) and decoded with an explicit schema by the C decoder
(:mod:`traceanalyzer.ingest.eventdecode`; Polars' NDJSON reader without it), so only the fields
analyses use are ever materialised and ``args`` stays unparsed apart from them. Each decoded chunk
is reduced to the rows and columns of the canonical frames (:func:`_reduce`, Polars; or its
compiled twin, :mod:`traceanalyzer.ingest.eventreduce`), and the frames are assembled from those
with Polars expressions.

Times: Chrome trace ``ts``/``dur`` are microseconds (floats in traces with ns resolution). The
decoder reads them as float64 µs; they become int64 ns by rounding the fractional part separately
from the integer part. That is exact for integer µs (up to 2**53), exact to the ns for
fractions while timestamps stay below 2**42 µs (4.4e12; recent Kineto writes timestamps relative
to ``baseTimeNanoseconds``, around 10**12 µs) and within a few ns up to 10**13 µs; absolute epoch
timestamps with ns fractions (~1.7e15 µs) resolve only to 0.25 µs.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import os
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import polars as pl
import polars.selectors as cs

from traceanalyzer.categories import activity_category
from traceanalyzer.errors import InputError
from traceanalyzer.ingest import eventassemble, eventdecode, eventreduce
from traceanalyzer.ingest.jsonscan import (
    DEFAULT_CHUNK_BYTES,
    EventRun,
    NotATrace,
    ScanResult,
    iter_ndjson_chunks,
)
from traceanalyzer.model import (
    API_KINDS,
    COLLECT_ENGINE,
    FRAME_SCHEMAS,
    Device,
    Trace,
    TraceMeta,
    conform,
    conform_lazy,
    empty_frame,
)

ARG_FIELDS: dict[str, pl.DataType] = {
    "External id": pl.Int64,
    "correlation": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    # Lists as text: decoding them as lists costs ~10% of the whole decode; only kernels have them.
    "grid": pl.String,
    "block": pl.String,
    "registers per thread": pl.Int64,
    "shared memory": pl.Int64,
    "bytes": pl.Int64,
    "Input Dims": pl.String,
    "Input type": pl.String,
    "Call stack": pl.String,
    # Memory events ("[memory]" instants).
    "Total Allocated": pl.Int64,
    "Total Reserved": pl.Int64,
    "Device Id": pl.Int64,
}

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.String,  # an int in most events, a string ("Spans", "") in some
    "tid": pl.String,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "args": pl.Struct(ARG_FIELDS),
}

# Matched lowercased. PyTorch 1.8's Kineto named them "Operator", "Runtime", "Python", "Kernel",
# "Memcpy" and "Memset" (the TensorBoard plugin reads both); _eventreduce.c keeps the same lists.
GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
                  "memcpy": "memcpy", "memset": "memset"}
CPU_CATEGORIES = {
    "cpu_op": "op",
    "operator": "op",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "python_function": "python",
    "runtime": "runtime",
    "python": "python",
}
STEP_PATTERN = r"^ProfilerStep#([0-9]+)$"
KEPT_PHASES = ["X", "i", "I"]
# Worker threads, and the chunks (and groups) decoding (and reducing) at once. The C decoder runs
# without the GIL, and so do most of the reduction's Polars calls; a third worker fills the gaps
# while one holds the GIL (300 MB: 1.01-1.03 -> 0.95-0.96 s; 1 GB 3.2-3.4 -> 2.9-3.2 s, peak
# memory within the noise, 848-908 MiB).
DECODE_THREADS = 3
GROUP_BYTES = 8 << 20  # trace bytes per reduction (see _decode_events)
# ... and for the first: a trace up to this size is one group, reduced once and assembled in C
# (eventassemble). At 16 MB, 20-50 MB traces were assembled by Polars and read at 509-728 MB/s;
# now 755-886 (bench/NOTES.md, round 15).
FIRST_GROUP_BYTES = 64 << 20
IN_FLIGHT_BYTES = DECODE_THREADS * DEFAULT_CHUNK_BYTES  # chunks decoding at once, in trace bytes
ARENA_PER_BYTE = 1.25  # decoded bytes a chunk's arena holds, per byte of trace (~0.75 used)
# Frames of this many rows and more are sorted a few columns at a time (see _cpu_frame_by_column)
COLUMNWISE_ROWS = 1 << 18
COLUMNS_AT_ONCE = 2  # ... this many, side by side

try:  # ISA-L inflates gzip about twice as fast as zlib; optional
    from isal import isal_zlib as _inflate

    INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate.error)
except ImportError:  # pragma: no cover - depends on the environment
    _inflate = zlib  # type: ignore[no-redef]
    INFLATE_ERRORS = (zlib.error,)


def read_kineto(path: str | os.PathLike[str]) -> Trace:
    """Read a Kineto/Chrome JSON trace (``.json`` or ``.json.gz``) into canonical frames."""
    path = Path(path)
    scan = ScanResult()
    read_twice = False
    try:
        try:
            with _open(path) as stream:
                events = _decode_events(stream, scan, path, by_layout=True)
        except _LayoutMismatch:
            # A piece cut by the events' layout was not whole events: read the file again
            # with the structural scan alone, which any valid JSON satisfies.
            scan, read_twice = ScanResult(), True
            with _open(path) as stream:
                events = _decode_events(stream, scan, path, by_layout=False)
    except NotATrace as exc:
        raise InputError(path, str(exc)) from None
    except (OSError, EOFError, *INFLATE_ERRORS) as exc:
        raise InputError(path, f"cannot be decompressed or read ({exc})") from None
    meta = _read_metadata(path, scan)
    if read_twice:  # correct either way, but twice the time: the tests watch for it
        meta.extra["read_twice"] = True
    return _assemble(events, meta)


def _open(path: Path) -> BinaryIO:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return GzipStream(open(path, "rb"))  # type: ignore[return-value]
    return open(path, "rb")


class GzipStream(io.RawIOBase):
    """Streaming gzip decompression that keeps what it decoded when the input is cut short.

    ``gzip.GzipFile`` discards a whole ``read()`` worth of output when the stream ends early; a
    profiler killed mid-write leaves exactly such a file, and its events must not be lost.
    ``readinto`` inflates straight into the caller's buffer (one copy per byte), with ISA-L's
    inflate when ``isal`` is installed (about twice zlib's speed).
    """

    def __init__(self, raw: BinaryIO, block: int = 1 << 20) -> None:
        self.raw, self.block = raw, block
        self.decomp = _inflate.decompressobj(wbits=31)
        self.pending = memoryview(b"")
        self.truncated = False
        self.done = False

    def readable(self) -> bool:
        return True

    def _refill(self) -> None:
        data = self.raw.read(self.block)
        if not data:
            if not self.decomp.eof:
                self.truncated = True
            self.done = True
            return
        out = self.decomp.decompress(data)
        while self.decomp.eof and self.decomp.unused_data:  # concatenated gzip members
            rest = self.decomp.unused_data
            self.decomp = _inflate.decompressobj(wbits=31)
            out += self.decomp.decompress(rest)
        self.pending = memoryview(out)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        have = 0
        while have < len(view):
            if not self.pending:
                if self.done:
                    break
                self._refill()
                continue
            take = min(len(self.pending), len(view) - have)
            view[have : have + take] = self.pending[:take]
            self.pending = self.pending[take:]
            have += take
        return have

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            parts = []
            while chunk := self.read(64 << 20):
                parts.append(chunk)
            return b"".join(parts)
        buf = bytearray(size)
        del buf[self.readinto(buf) :]
        return bytes(buf)

    def close(self) -> None:
        self.raw.close()
        super().close()


_threads: ThreadPoolExecutor | None = None


class _Tasks:
    """One read's tasks on the decoding threads, which the process keeps for its later reads.

    Starting three threads for each read cost ~2 ms (of ~36 for a 10 MB trace in a warm process),
    and a batch worker reads trace after trace. On the way out, as a pool of the read's own
    would, this cancels the read's tasks that have not started and waits for the others.
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
                   by_layout: bool) -> list[_Parts | _Reduced]:
    # Each chunk decodes (and, compiled, reduces) on one of DECODE_THREADS threads, without the
    # GIL, while this thread cuts the next ones. Chunks are then joined in groups of up to
    # GROUP_BYTES of trace, text as categories when there are several groups: a Polars step has
    # a fixed cost of a few ms, which 4 MB chunks paid ~250 times per GB, and a trace below
    # FIRST_GROUP_BYTES pays it once. At most IN_FLIGHT_BYTES of chunks decode and
    # DECODE_THREADS groups are joined at a time, which bounds memory. (A bound in bytes, not in
    # chunks: with a count of three, the last piece of a 10 MB trace, after three 4 MB chunks,
    # went on only when the first of them was done, and then decoded alone at the end.)
    decoding: deque[tuple[int, Future[pl.DataFrame | _Reduced]]] = deque()
    reducing: deque[Future[_Parts | _Reduced]] = deque()
    parts: list[_Parts | _Reduced] = []
    group: list[pl.DataFrame | _Reduced] = []
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
            # The first chunk on each thread in huge pages: see _eventdecode.c's arena_bytes.
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
    return parts or [_reduce(pl.DataFrame(schema=EVENT_SCHEMA))]


def _reduce_group(chunks: list[pl.DataFrame | _Reduced], compact: bool) -> _Parts | _Reduced:
    # Reduced right away to what the canonical frames take, so decoded chunks never pile up.
    # A chunk the compiled reduction took arrives reduced; the others are decoded events.
    if all(isinstance(c, pl.DataFrame) for c in chunks):
        return _reduce(pl.concat(chunks) if len(chunks) > 1 else chunks[0], compact)
    if all(isinstance(c, _Reduced) for c in chunks):  # one frame per table for the whole group
        joined = _Reduced.join(chunks)
        if not compact:  # the trace's only group: see _assemble
            return joined
        parts = [_compiled_parts(*joined)]
    else:
        parts = [_compiled_parts(*c) if isinstance(c, _Reduced) else _reduce(c) for c in chunks]
    frames = []
    for name in _Parts.TABLES:
        frame = pl.concat([getattr(p, name) for p in parts], rechunk=False)
        if compact and name in ("cpu", "gpu"):  # as _reduce does: see _as_categories
            frame = frame.with_columns(cs.string().cast(pl.Categorical))
        frames.append(frame)
    return _Parts(sum(p.untimed for p in parts), sum(p.negative for p in parts), frames)


def _chunks_until_damage(stream: BinaryIO, scan: ScanResult, by_layout: bool) -> Any:
    """Yield NDJSON chunks; a gzip stream cut short counts as truncation, not as an error."""
    try:
        yield from iter_ndjson_chunks(stream, scan, keep_phases="".join(KEPT_PHASES).encode(),
                                      by_layout=by_layout,
                                      raw_runs=by_layout and eventdecode.AVAILABLE)
    except (EOFError, gzip.BadGzipFile, *INFLATE_ERRORS) as exc:
        if not scan.found_events_array:
            raise
        scan.truncated = True
        scan.warnings.append(f"compressed stream ends early ({exc}); kept the events read so far")


class _Reduced(NamedTuple):
    """A chunk the compiled reduction took: its columns, made frames per group, not per chunk
    (a frame's fixed cost is most of a small chunk's)."""

    untimed: int
    negative: int
    tables: list[eventreduce.ReducedTable]

    @staticmethod
    def join(chunks: list[_Reduced]) -> _Reduced:
        """The chunks as one: their tables with a batch per chunk, in order."""
        tables = [(layout, [batch for c in chunks for batch in c.tables[i][1]])
                  for i, (layout, _) in enumerate(chunks[0].tables)]
        return _Reduced(sum(c.untimed for c in chunks), sum(c.negative for c in chunks), tables)


def _decode_chunk(chunk: bytes | EventRun, scan: ScanResult,
                  arena_bytes: int = 0) -> pl.DataFrame | _Reduced:
    """A chunk's events, reduced already when the compiled reduction takes them."""
    run = isinstance(chunk, EventRun)
    raw = eventdecode.decode_raw(chunk.data if run else chunk, EVENT_SCHEMA,
                                 keep=("ph", KEPT_PHASES), arena_bytes=arena_bytes)
    if raw is not None:
        reduced = eventreduce.reduce(raw)
        return eventdecode.to_frame(raw, EVENT_SCHEMA) if reduced is None else _Reduced(*reduced)
    if run:  # events cut by the learned layout: a run the decoder declines may be cut wrong
        raise _LayoutMismatch
    try:  # no compiled decoder, or a chunk it leaves to Polars
        return _kept(pl.read_ndjson(io.BytesIO(chunk), schema=EVENT_SCHEMA, ignore_errors=True))
    except pl.exceptions.PolarsError:
        if scan.split_by_layout:
            raise _LayoutMismatch from None
        return _kept(_decode_chunk_slowly(chunk, scan))


def _kept(events: pl.DataFrame) -> pl.DataFrame:
    """The events of KEPT_PHASES, as the C decoder keeps them (the scan drops most others)."""
    return events.filter(pl.col("ph").is_in(KEPT_PHASES))


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
                               parse_constant=lambda _c: None, parse_int=_bounded_int)
            if not isinstance(event, dict):
                dropped += 1
                continue
            clean.append(_utf8(json.dumps(event, allow_nan=False, default=str,
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


def _bounded_int(text: str) -> int | None:
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _read_metadata(path: Path, scan: ScanResult) -> TraceMeta:
    warnings = list(scan.warnings)
    if scan.truncated:
        warnings.append(
            f"trace is truncated ({scan.truncated_tail_bytes} bytes of an incomplete event at "
            "the end); analyzed the complete events before it"
        )
    top: Any
    try:
        # A BOM is allowed. (Cut here, not by the "utf-8-sig" codec: its module's import
        # was ~0.15 ms of a 10 MB trace's read.)
        text = scan.metadata_json.removeprefix(codecs.BOM_UTF8).decode(errors="replace")
        top = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: metadata nested thousands deep
        top = {}
        if not scan.truncated:
            warnings.append("the trace's top-level metadata is not valid JSON; ignored it")
    if not isinstance(top, dict):
        top = {}
    devices = [_device(d, top) for d in top.get("deviceProperties") or [] if isinstance(d, dict)]
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    base = top.get("baseTimeNanoseconds")
    extra = {k: top[k] for k in ("schemaVersion", "displayTimeUnit", "traceName", "cupti_version",
                                  "cuda_runtime_version", "roctracer_version",
                                  "hip_runtime_version", "record_shapes", "with_stack")
             if k in top and isinstance(top[k], (int, float, str, bool))}
    if dist:
        extra["distributed"] = {k: v for k, v in dist.items()
                                if k in ("backend", "rank", "world_size", "nccl_version")}
    return TraceMeta(
        path=str(path),
        source_format="kineto",
        profiler="PyTorch Profiler (Kineto)",
        devices=devices,
        rank=_int(dist.get("rank"), 0, bits=32),
        world_size=_int(dist.get("world_size"), 1, bits=32),
        time_base_ns=_int(base, None),
        warnings=warnings,
        extra=extra,
    )


def _device(d: dict[str, Any], top: dict[str, Any]) -> Device:
    name = str(d.get("name")) if d.get("name") is not None else None
    amd = any(k in top for k in ("roctracer_version", "hip_runtime_version")) or (
        name is not None and any(s in name for s in ("AMD", "Radeon", "Instinct"))
    )
    major, minor = d.get("computeMajor"), d.get("computeMinor")
    return Device(
        id=_int(d.get("id"), 0, bits=32),
        name=name,
        sm_count=_int(d.get("numSms"), None),
        memory_bytes=_int(d.get("totalGlobalMem"), None),
        compute_capability=f"{major}.{minor}" if major is not None else None,
        vendor="amd" if amd else "nvidia",
    )


def _int(value: Any, default: Any, bits: int = 64) -> Any:
    """``value`` as an int if it is one that fits a signed ``bits``-bit integer, else ``default``."""
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        return default
    return out if -(2 ** (bits - 1)) <= out < 2 ** (bits - 1) else default


def _ns(col: str) -> pl.Expr:
    """µs floats to int64 ns, rounding the fraction on its own to keep ns exact."""
    us = pl.col(col)
    whole = us.floor()
    return (whole.cast(pl.Int64, strict=False) * 1000 + ((us - whole) * 1000).round().cast(pl.Int64))


class _Parts:
    """One chunk's events, already reduced to the rows and columns the canonical frames take.

    Reducing each chunk as soon as it is decoded keeps the peak of memory near the final frames
    plus one chunk: long names, ``args`` fields and event kinds nothing uses never pile up. Only
    the steps that need every event (the parent-op and launch joins, dedup, sorting) wait for
    :func:`_assemble`.
    """

    __slots__ = ("untimed", "negative", "cpu", "gpu", "annotations", "syncs", "memory")
    TABLES = __slots__[2:]

    def __init__(self, untimed: int, negative: int, frames: list[pl.DataFrame]) -> None:
        self.untimed, self.negative = untimed, negative
        self.cpu, self.gpu, self.annotations, self.syncs, self.memory = frames


def _build_trace(events: pl.DataFrame, meta: TraceMeta) -> Trace:
    """Canonical frames from decoded events (``EVENT_SCHEMA``, any phase) in one piece."""
    return _assemble([_reduce(_kept(events))], meta)


def _reduce(events: pl.DataFrame, compact: bool = False) -> _Parts:
    # Only KEPT_PHASES arrive: filtering here again copied every column of every event.
    ev = (
        events.lazy()
        .with_columns(
            cat=pl.col("cat").str.to_lowercase(),
            start_ns=_ns("ts"),
            dur_ns=(pl.col("dur") * 1000).round().cast(pl.Int64, strict=False).fill_null(0),
            pid_int=pl.col("pid").cast(pl.Int64, strict=False),
            tid_int=pl.col("tid").cast(pl.Int64, strict=False),
        )
        .unnest("args")
        .with_columns(end_ns=pl.col("start_ns") + pl.col("dur_ns").clip(lower_bound=0))
        .collect(engine=COLLECT_ENGINE)
    )
    # Events whose timestamp is missing, not a number or beyond int64 ns cannot be placed in
    # time: they are skipped (and counted, for the user).
    counts = ev.lazy().select(untimed=pl.col("start_ns").is_null().sum(),
                              negative=(pl.col("start_ns").is_not_null() & (pl.col("dur_ns") < 0)).sum())
    lazy = ev.lazy().filter(pl.col("start_ns").is_not_null())
    cpu, gpu = _cpu_rows(lazy), _gpu_rows(lazy)
    if compact:
        cpu, gpu = _as_categories(cpu), _as_categories(gpu)
    # Without common-subplan elimination: caching the shared filter for the six queries cost
    # more than filtering six times (5.3 vs 6.6 ms on a 10 MB trace).
    *frames, counted = pl.collect_all([cpu, gpu, _annotation_rows(lazy), _sync_rows(lazy),
                                       _memory_rows(lazy), counts], engine=COLLECT_ENGINE,
                                      optimizations=pl.QueryOptFlags(comm_subplan_elim=False))
    return _Parts(counted["untimed"].item(), counted["negative"].item(), frames)


# The columns of the compiled reduction's tables (_eventreduce.c's LAYOUT), named as
# :func:`_reduce`'s frames name them; the columns it leaves null are added by name.
_COMPILED_COLUMNS = (
    ("name", "start_ns", "end_ns", "correlation", "kind", "pid", "tid", "external_id",
     "input_dims", "input_types", "call_stack"),
    ("device", "stream", "kind", "name", "start_ns", "end_ns", "correlation", "external_id",
     "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_mem",
     "bytes"),
    ("pid", "tid", "kind", "name", "start_ns", "end_ns", "step"),
    ("pid", "tid", "device", "stream", "sync_type", "start_ns", "end_ns", "correlation"),
    ("pid_int", "Device Id", "start_ns", "Total Allocated", "Total Reserved"),
)


_NULL_LETTERS = {pl.Int32: "i", pl.String: "t"}  # the columns left null, by type


def _compiled_parts(untimed: int, negative: int, tables: list[eventreduce.ReducedTable]) -> _Parts:
    """:func:`_reduce`'s frames from the compiled reduction's columns (the same frames: tested).

    No frame queries (their fixed cost was most of a chunk's): a frame per table, a chunk per
    batch, straight from the reduction's buffers.
    """
    frames = []
    for name, names, (layout, batches) in zip(_Parts.TABLES, _COMPILED_COLUMNS, tables,
                                              strict=True):
        schema = None
        if name in ("gpu", "annotations", "syncs"):  # the canonical frames' column order and types
            schema = {col: dtype for col, dtype in FRAME_SCHEMAS[name].items()
                      if col not in ASSEMBLED_GPU_COLUMNS}
            at = {col: i for i, col in enumerate(names)}
            layout = "".join(layout[at[col]] if col in at else _NULL_LETTERS[dtype]
                             for col, dtype in schema.items())
            batches = [(rows, tuple(cols[at[col]] if col in at else None for col in schema))
                       for rows, cols in batches]
            names = tuple(schema)
        frame = eventreduce.frame(layout, names, batches)
        given = frame.schema
        for i, (col, dtype) in enumerate((schema or {}).items()):
            if given[col] != dtype:  # the kinds, text until cast to their Enum
                frame.replace_column(i, frame.get_column(col).cast(dtype))
        frames.append(frame)
    return _Parts(untimed, negative, frames)


def _as_categories(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Text columns as categories until the frames are assembled.

    Names, shapes and kinds repeat thousands of times. As categories a chunk's rows hold four
    bytes per value and no longer keep the decoded chunk's string buffers alive, which cut the
    peak memory of a 1 GB ingest by a fifth; ``conform`` turns them back into text at the end.
    """
    return rows.with_columns(cs.string().cast(pl.Categorical))


def _assemble(parts: list[_Parts | _Reduced], meta: TraceMeta) -> Trace:
    untimed = sum(p.untimed for p in parts)
    if untimed:
        meta.warnings.append(f"skipped {untimed} events without a usable timestamp (ts)")
    negative = sum(p.negative for p in parts)
    if negative:
        meta.warnings.append(f"{negative} events have a negative duration; treated as zero-length")
    if len(parts) == 1 and isinstance(parts[0], _Reduced):  # one group, reduced in C
        trace = _assemble_compiled(parts[0].tables, meta)
        if trace is not None:
            return trace
    parts = [_compiled_parts(*p) if isinstance(p, _Reduced) else p for p in parts]

    def cat(name: str) -> pl.DataFrame:
        # Each chunk's piece is released as soon as it is part of the whole.
        pieces = [getattr(p, name) for p in parts]
        for p in parts:
            setattr(p, name, None)
        return pl.concat(pieces, how="vertical_relaxed", rechunk=False)

    rank = pl.lit(meta.rank, pl.Int32)
    cpu, gpu = _cpu_and_gpu_frames([cat("cpu").with_columns(rank=rank)],
                                   cat("gpu").with_columns(rank=rank), meta)
    return Trace(
        meta=meta,
        gpu=gpu,
        cpu=cpu,
        annotations=cat("annotations").with_columns(rank=rank).sort("start_ns", maintain_order=True),
        syncs=cat("syncs").with_columns(rank=rank).sort("start_ns", maintain_order=True),
        counters=_counter_frame(cat("memory").with_columns(rank=rank)),
    )


def _assemble_compiled(tables: list[eventreduce.ReducedTable], meta: TraceMeta) -> Trace | None:
    """The frames from the compiled assembly (:mod:`eventassemble`; the same frames as the
    Polars assembly: tested), or None where it declines."""
    assembled = eventassemble.assemble(tables, meta.rank)
    if assembled is None:
        return None
    without_launch, frames = assembled
    if frames["gpu"].height:
        meta.extra["gpu_without_launch"] = without_launch
    layout, batches = tables[_Parts.TABLES.index("memory")]
    counters = empty_frame("counters")
    if any(rows for rows, _ in batches):
        memory = eventreduce.frame(layout, _COMPILED_COLUMNS[-1], batches)
        counters = _counter_frame(memory.with_columns(rank=pl.lit(meta.rank, pl.Int32)))
    return Trace(meta=meta, counters=counters, **frames)


def _cpu_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    return ev.filter(
        (pl.col("ph") == "X")
        & pl.col("cat").is_in(list(CPU_CATEGORIES))
        & ~pl.col("name").str.contains(STEP_PATTERN)
    ).select(
        "name", "start_ns", "end_ns", "correlation",
        kind=_lookup("cat", CPU_CATEGORIES, default="other"),
        pid=pl.col("pid_int"),
        tid=pl.col("tid_int"),
        external_id=pl.col("External id"),
        input_dims=pl.col("Input Dims"),
        input_types=pl.col("Input type"),
        call_stack=pl.when(pl.col("Call stack") != "").then(pl.col("Call stack")),
    )


def _lookup(column: str, mapping: dict[str, str], default: str | None = None) -> pl.Expr:
    """``replace_strict`` for a handful of keys, as a when/then chain: per chunk, the join that
    ``replace_strict`` builds cost more than the whole column's work (0.8 of 5 ms a chunk)."""
    expr = pl.lit(default, pl.String)
    for key, value in reversed(mapping.items()):
        expr = pl.when(pl.col(column) == key).then(pl.lit(value)).otherwise(expr)
    return expr


def _cpu_and_gpu_frames(cpu_rows: list[pl.DataFrame], gpu_rows: pl.DataFrame,
                        meta: TraceMeta) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The CPU and GPU frames. ``cpu_rows`` holds the only reference to the CPU rows, which a
    big trace's CPU frame drops column by column as it builds them."""
    rows = cpu_rows[0]
    gpu = None if gpu_rows.is_empty() else _gpu_plan(gpu_rows, _launches(rows.lazy()))
    if rows.height < COLUMNWISE_ROWS:
        # One collect for both frames: Polars runs the two queries side by side, where one after
        # the other left a core idle (each is too small to keep two busy on its own).
        lazy = rows.lazy()
        cpu_plan = conform_lazy(pl.concat([lazy, _parent_ops(lazy)], how="horizontal")
                                .sort("start_ns", maintain_order=True), "cpu")
        cpu, *collected = pl.collect_all([cpu_plan] + ([gpu] if gpu is not None else []),
                                         engine=COLLECT_ENGINE)
        gpu_frame = collected[0] if collected else None
    else:
        # The GPU frame first, while the CPU rows are still compact: the CPU frame is the peak.
        gpu_frame = gpu.collect(engine=COLLECT_ENGINE) if gpu is not None else None
        del rows, gpu
        cpu = _cpu_frame_by_column(cpu_rows.pop())
    if gpu_frame is None:
        return cpu, empty_frame("gpu")
    return cpu, _deduplicated_gpu(gpu_frame, gpu_rows.height, meta)


def _cpu_frame_by_column(cpu: pl.DataFrame) -> pl.DataFrame:
    # Eager, a few columns at a time: a lazy join and sort of the whole frame cost several times
    # the frame's size in transient memory (the ingest's peak).
    cpu = cpu.with_columns(_parent_ops(cpu.lazy()).collect(engine=COLLECT_ENGINE).to_series())
    # A stable sort (ties in start_ns stay in file order: chunks arrive in order) and the cast to
    # the canonical types, a few columns at a time: each is dropped from the input as soon as
    # its sorted copy exists, so the frame is never held twice (the ingest's memory peak), and
    # the columns of one step are gathered side by side (one at a time left a core idle).
    order = cpu.select(pl.arg_sort_by("start_ns", maintain_order=True)).to_series()
    schema = FRAME_SCHEMAS["cpu"]
    names = list(schema)
    columns: dict[str, pl.Series] = {}
    for start in range(0, len(names), COLUMNS_AT_ONCE):
        step = [col for col in names[start:start + COLUMNS_AT_ONCE] if col in cpu.columns]
        sorted_step = cpu.select(pl.col(col).gather(order).cast(schema[col], strict=False)
                                 for col in step)
        cpu = cpu.drop(step)
        columns |= {col: sorted_step.get_column(col) for col in step}
        del sorted_step
    return pl.DataFrame([columns[col] if col in columns
                         else pl.repeat(None, order.len(), dtype=dtype, eager=True).alias(col)
                         for col, dtype in schema.items()])


def _parent_ops(rows: pl.LazyFrame) -> pl.LazyFrame:
    """``parent_op`` of each row: for runtime and driver calls, the operator that issued them.

    The operator shares the call's Kineto "External id". Only the ids that some launch carries
    are grouped: grouping every operator (1.5 M at 1 GB) was the largest allocation of the
    whole ingest.
    """
    calls = pl.col("kind").is_in(API_KINDS)
    launch_ids = rows.filter(calls).select("external_id").drop_nulls().unique()
    ops = (
        rows.filter(pl.col("kind") == "op")
        .join(launch_ids, on="external_id", how="semi")
        .group_by("external_id")
        .agg(parent_op=pl.col("name").sort_by("start_ns", maintain_order=True).last())
    )
    return (
        rows.select("external_id", call=calls)
        .join(ops, on="external_id", how="left", maintain_order="left")
        .select(parent_op=pl.when("call").then("parent_op"))
    )


def _gpu_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    """GPU activities with every row-wise column; the launch join waits for all CPU rows."""
    gpu = ev.filter((pl.col("ph") == "X") & pl.col("cat").is_in(list(GPU_CATEGORIES)))
    gpu = gpu.with_columns(
        kind=_lookup("cat", GPU_CATEGORIES),
        device=pl.coalesce("device", "pid_int"),
        stream=pl.coalesce("stream", "tid_int"),
        external_id=pl.col("External id"),
        **_dims("grid"),
        **_dims("block"),
        registers=pl.col("registers per thread"),
        shared_mem=pl.col("shared memory"),
    )
    return conform_lazy(gpu, "gpu", exclude=ASSEMBLED_GPU_COLUMNS)


def _dims(field: str) -> dict[str, pl.Expr]:
    """``grid_x/y/z`` from the decoder's text of ``[64, 1, 1]``; null where a number is missing."""
    groups = pl.col(field).str.extract_groups(
        r"^\[(?-u:\s)*(-?[0-9]+)(?:(?-u:\s)*,(?-u:\s)*(-?[0-9]+))?(?:(?-u:\s)*,(?-u:\s)*(-?[0-9]+))?")
    return {f"{field}_{axis}": groups.struct.field(str(i + 1)).cast(pl.Int64, strict=False)
            for i, axis in enumerate("xyz")}


#: GPU columns that follow from (kind, name) alone: computed once per distinct name.
NAME_COLUMNS = ("category", "copy_kind", "src_kind", "dst_kind")
#: GPU columns the assembly adds (they need all events); a chunk's GPU rows leave them out.
ASSEMBLED_GPU_COLUMNS = ("graph_launched", *NAME_COLUMNS)


def _name_columns(pairs: pl.LazyFrame) -> pl.LazyFrame:
    """Category and copy direction of each distinct (kind, name): regexes run once per name."""
    name, kind = pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String)
    copy = name.str.extract_groups(r"Memcpy ((?-u:\w)+) \(((?-u:\w)+) -> ((?-u:\w)+)\)")
    out = pairs.with_columns(
        category=activity_category(kind, name),
        copy_kind=copy.struct.field("1"),
        src_kind=copy.struct.field("2").str.to_lowercase(),
        dst_kind=copy.struct.field("3").str.to_lowercase(),
    )
    # AMD traces name copies differently ("CopyHostToDevice"): fill what the name did not give.
    return out.with_columns(
        copy_kind=pl.when(kind == "memcpy").then(
            pl.coalesce(
                pl.col("copy_kind"),
                name.str.to_lowercase().str.extract(r"(hosttodevice|devicetohost|devicetodevice)")
                .replace({"hosttodevice": "HtoD", "devicetohost": "DtoH", "devicetodevice": "DtoD"}),
            )
        ),
    )


def _launches(cpu_rows: pl.LazyFrame) -> pl.LazyFrame:
    """Whether each correlation id's launch call launched a CUDA graph: the first call in time
    (in file order among equal times) decides, as in the sorted CPU frame."""
    return (
        cpu_rows.filter(pl.col("kind").is_in(API_KINDS))
        .select("correlation", "start_ns", launch_name=pl.col("name").cast(pl.String))
        .sort("start_ns", maintain_order=True)
        .unique("correlation", keep="first")
        .select("correlation",
                graph_launched=pl.col("launch_name").str.contains("(?i)graphlaunch"))
    )


def _gpu_plan(rows: pl.DataFrame, launches: pl.LazyFrame) -> pl.LazyFrame:
    lazy = rows.lazy()
    names = _name_columns(lazy.select("kind", "name").unique())
    gpu = (
        lazy.join(names, on=["kind", "name"], how="left", nulls_equal=True, maintain_order="left")
        .join(launches, on="correlation", how="left", maintain_order="left")
    )
    # Sorted while names are still categories (cheap to move and compare); cast to the
    # canonical types once, after deduplication.
    return (conform_lazy(gpu, "gpu", dtypes={"name": pl.Categorical})
            .sort("start_ns", maintain_order=True))


def _deduplicated_gpu(gpu: pl.DataFrame, rows_in: int, meta: TraceMeta) -> pl.DataFrame:
    # Activities launched before profiling began have no launch call (and so no graph_launched);
    # count them, don't warn.
    meta.extra["gpu_without_launch"] = gpu.select(
        (pl.col("graph_launched").is_null() & (pl.col("kind") == "kernel")).sum()
    ).item()
    # Exact duplicate rows share these five numbers: hashing them finds out whether there are
    # any for a fifth of the cost of comparing whole rows, which then only runs when needed.
    if gpu.select("start_ns", "end_ns", "device", "stream", "correlation").is_duplicated().any():
        gpu = gpu.unique(maintain_order=True)
    if gpu.height < rows_in:
        meta.warnings.append(f"dropped {rows_in - gpu.height} duplicate GPU events")
    return gpu.with_columns(name=pl.col("name").cast(pl.String))


def _annotation_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    step = pl.col("name").str.extract(STEP_PATTERN).cast(pl.Int64, strict=False)
    # The literal prefix first: the regex then runs on a handful of rows, not on every event.
    candidates = pl.col("name").str.starts_with("ProfilerStep#") | pl.col("cat").is_in(
        ["user_annotation", "gpu_user_annotation"])
    ann = ev.filter((pl.col("ph") == "X") & candidates).with_columns(step=step).filter(
        pl.col("step").is_not_null() | pl.col("cat").is_in(["user_annotation", "gpu_user_annotation"])
    ).with_columns(
        kind=pl.when(pl.col("step").is_not_null() & (pl.col("cat") != "gpu_user_annotation"))
        .then(pl.lit("step"))
        .when(pl.col("cat") == "gpu_user_annotation")
        .then(pl.lit("gpu_user"))
        .otherwise(pl.lit("user")),
        pid=pl.col("pid_int"),
        tid=pl.col("tid_int"),
    )
    return conform_lazy(ann, "annotations")


def _sync_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    syncs = ev.filter((pl.col("ph") == "X") & (pl.col("cat") == "cuda_sync")).with_columns(
        pid=pl.col("pid_int"),
        tid=pl.col("tid_int"),
        device=pl.coalesce("device", "pid_int"),
        # "Stream Sync", "Event Sync", "Context Sync", "Stream Wait Event": the types nsys names.
        sync_type=pl.when(pl.col("name").str.contains("(?i)wait"))
        .then(pl.lit("stream_wait"))
        .otherwise(pl.col("name").str.to_lowercase().str.extract(r"^((?-u:\w)+)")),
    )
    return conform_lazy(syncs, "syncs")


def _memory_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    return ev.filter(pl.col("name") == "[memory]").select(
        "pid_int", "Device Id", "start_ns", "Total Allocated", "Total Reserved"
    )


def _counter_frame(mem: pl.DataFrame) -> pl.DataFrame:
    if mem.is_empty():
        return empty_frame("counters")
    long = pl.concat(
        [
            mem.select("rank", pid="pid_int", device="Device Id", ts_ns="start_ns",
                       value=pl.col(src).cast(pl.Float64), name=pl.lit(name))
            for src, name in (("Total Allocated", "allocated_bytes"), ("Total Reserved", "reserved_bytes"))
        ]
    )
    return conform(long.sort("ts_ns"), "counters")
