"""Turn decoded Perfetto tables (tracks, events, annotations, counters) into canonical frames.

Both Perfetto routes end here: the native packet decoder and trace_processor's SQL tables. The
layouts understood are described in docs/perfetto.md. In short, a slice is GPU activity when its
category says so (``kernel``, ``gpu_memcpy``, ``gpu_memset``, rocprofv3's ``kernel_dispatch`` and
``memory_copy``) or, lacking a known category, when its track is a GPU track (rocprofv3's
``COMPUTE AGENT [n] STREAM [s]``, or any track named after a GPU / stream). Everything else on a
thread is host activity, split into runtime/driver calls, operators and annotations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from traceanalyzer.categories import activity_category
from traceanalyzer.ingest.memory import counter_memory
from traceanalyzer.ingest.perfetto.annotations import INT_KEYS, KEY_CODES, STR_KEYS
from traceanalyzer.ingest.perfetto.tables import (
    INT_VALUE_SCHEMA,
    STR_VALUE_SCHEMA,
    TYPE_COMPLETE,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    RawTables,
)
from traceanalyzer.model import (
    API_KINDS,
    COLLECT_ENGINE,
    COPY_KINDS,
    TIME_LIMIT_NS,
    Device,
    Trace,
    TraceMeta,
    conform,
)

#: Name of the instant event our writer uses to carry trace-level metadata (rank, world size).
META_EVENT = "traceanalyzer.meta"

GPU_KERNEL_CATS = ("kernel", "kernel_dispatch", "gpu_kernel", "cuda_kernel")
GPU_MEMCPY_CATS = ("gpu_memcpy", "memory_copy", "memcpy")
GPU_MEMSET_CATS = ("gpu_memset", "memset")
GPU_CATS = GPU_KERNEL_CATS + GPU_MEMCPY_CATS + GPU_MEMSET_CATS
RUNTIME_CATS = ("cuda_runtime", "hip_api", "hip_runtime_api", "rccl_api")
DRIVER_CATS = ("cuda_driver", "hsa_api", "hip_driver")
ANNOTATION_CATS = ("user_annotation", "gpu_user_annotation", "marker_api", "nvtx", "roctx")
SYNC_CATS = ("cuda_sync",)
#: Host categories with a fixed CPU kind (Kineto's names, rocprofv3's, and our writer's).
CPU_CAT_KIND = {
    "cpu_op": "op",
    "operator": "op",
    "python_function": "python",
    "cpu_other": "other",
    **{c: "runtime" for c in RUNTIME_CATS},
    **{c: "driver" for c in DRIVER_CATS},
}
#: Categories that are not trace activity: Kineto's profiler span, our writer's meta and findings.
IGNORED_CATS = ("trace", "traceanalyzer", "traceanalyzer_finding")
#: Host categories that never become GPU activity, even on a track that looks like a GPU.
HOST_CATS = tuple(CPU_CAT_KIND) + ANNOTATION_CATS + SYNC_CATS + IGNORED_CATS
ROCPROF_CATS = ("kernel_dispatch", "memory_copy", "hip_api", "hsa_api", "marker_api", "rccl_api")

_GPU_TRACK = re.compile(r"^(?:COMPUTE|COPY)\b|\bGPU\b|\bAGENT\s*\[", re.IGNORECASE)
_DEVICE = re.compile(r"(?:AGENT|GPU)\s*\[?\s*(-?\d+)", re.IGNORECASE)
_STREAM = re.compile(r"(?:STREAM|QUEUE)\s*\[?\s*#?\s*(\d+)", re.IGNORECASE)
_COPY_TRACK = re.compile(r"^COPY\b")
#: rocprofv3 names the tracks of threads other than the main one "THREAD <n> (<tid>)" and gives
#: them no thread descriptor.
_ROCPROF_THREAD = re.compile(r"^THREAD \d+ \((\d+)\)")


@dataclass
class TrackInfo:
    uuid: int
    pid: int | None
    tid: int | None
    name: str | None
    is_gpu: bool
    is_copy: bool
    device: int | None
    stream: int | None


def resolve_tracks(tracks: pl.DataFrame) -> pl.DataFrame:
    """One row per track with its process, thread, and what its names say about GPUs.

    Tracks are few (one per thread, stream or counter), so a plain walk up the parents is fine.
    """
    rows = {r["uuid"]: r for r in tracks.iter_rows(named=True)}
    pids = {r["pid"] for r in rows.values() if r["pid"] is not None}
    only_pid = pids.pop() if len(pids) == 1 else None
    out: list[TrackInfo] = []
    for uuid, row in rows.items():
        pid, tid = row["pid"], row["tid"]
        named_thread = _ROCPROF_THREAD.match(row["name"] or "") if tid is None else None
        if named_thread:
            tid = int(named_thread.group(1))
        names: list[str] = []
        seen: set[int] = set()
        cur: dict[str, Any] | None = row
        while cur is not None and cur["uuid"] not in seen:
            seen.add(cur["uuid"])
            names.extend(n for n in (cur["name"], cur["thread_name"], cur["process_name"]) if n)
            if pid is None:
                pid = cur["pid"]
            parent = cur["parent_uuid"]
            cur = rows.get(parent) if parent else None
        if pid is None and named_thread:
            pid = only_pid  # rocprofv3 writes one process per file
        text = " | ".join(names)
        device = _DEVICE.search(text)
        stream = _STREAM.search(text)
        own = row["name"] or ""
        out.append(
            TrackInfo(
                uuid=uuid,
                pid=pid,
                tid=tid,
                name=row["name"] or row["thread_name"] or row["process_name"],
                is_gpu=bool(_GPU_TRACK.search(text)) and tid is None,
                is_copy=bool(_COPY_TRACK.search(own)),
                device=int(device.group(1)) if device else None,
                stream=int(stream.group(1)) if stream else None,
            )
        )
    return pl.DataFrame(
        [vars(t) for t in out],
        schema={
            "uuid": pl.UInt64,
            "pid": pl.Int64,
            "tid": pl.Int64,
            "name": pl.String,
            "is_gpu": pl.Boolean,
            "is_copy": pl.Boolean,
            "device": pl.Int64,
            "stream": pl.Int64,
        },
        orient="row",
    ).rename(
        {
            "pid": "track_pid",
            "tid": "track_tid",
            "name": "track_name",
            "device": "track_device",
            "stream": "track_stream",
        }
    )


def pair_slices(events: pl.DataFrame) -> tuple[pl.DataFrame, int, int]:
    """Match begin/end events per track into slices; add complete events.

    Returns (slices with idx, track, name, category, flow, start_ns, end_ns, in the order of
    their begins' (track, ts, idx); begins never ended; ends with no begin). Ends match begins
    by nesting depth: on one track, the event after a begin at depth d that is also at depth d
    is its end, so a cumulative sum and a shift pair them all without a stack.
    """
    # Only the numbers are sorted; the matched begins' texts are gathered afterwards.
    be = events.select("idx", "ts", "type", "track", pos=pl.int_range(pl.len(), dtype=pl.UInt32))
    be = _sort_by_track_ts_idx(be.filter(pl.col("type").is_in([TYPE_SLICE_BEGIN, TYPE_SLICE_END])))
    be = (
        be.with_columns(
            is_begin=pl.col("type") == TYPE_SLICE_BEGIN,
        )
        .with_columns(
            depth=pl.when(pl.col("is_begin")).then(1).otherwise(-1).cum_sum().over("track"),
        )
        .with_columns(level=pl.when(pl.col("is_begin")).then(pl.col("depth") - 1).otherwise("depth"))
        .with_columns(
            next_is_end=(~pl.col("is_begin")).shift(-1).over(["track", "level"]),
            end_ns=pl.col("ts").shift(-1).over(["track", "level"]),
            prev_is_begin=pl.col("is_begin").shift(1).over(["track", "level"]),
        )
    )
    begins = be.filter(pl.col("is_begin"))
    matched = begins.filter(pl.col("next_is_end").fill_null(False))
    unended = begins.height - matched.height
    orphan_ends = be.filter(~pl.col("is_begin") & ~pl.col("prev_is_begin").fill_null(False)).height
    slices = events.select("idx", "track", "name", "category", "flow")[matched["pos"]]
    slices = slices.with_columns(start_ns=matched["ts"], end_ns=matched["end_ns"])
    return slices, unended, orphan_ends


def paired_slices(events: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """The slices of :func:`pair_slices`, from the pairs the walker made as the events came
    (each track's in time order, so that the begins' (track, idx) order is their (track, ts,
    idx) order): only the matched begins are sorted, and by one key."""
    begin = pairs["begin"].to_numpy()
    order = np.argsort(begin)
    begin = begin[order]
    by_track = np.argsort(events["track"].to_numpy()[begin], kind="stable")
    rows = begin[by_track]
    slices = events.select("idx", "track", "name", "category", "flow", start_ns="ts")[rows]
    return slices.with_columns(end_ns=pairs["end_ns"].to_numpy()[order][by_track])


def _sort_by_track_ts_idx(events: pl.DataFrame) -> pl.DataFrame:
    """``events.sort("track", "ts", "idx")`` as stable one-key sorts: a trace has few tracks, and
    Polars' multi-key sort led by a column of few values was 3x slower (bench/NOTES.md)."""
    if not events["idx"].is_sorted():
        events = events.sort("idx")
    return events.sort("ts", maintain_order=True).sort("track", maintain_order=True)


@dataclass
class AnnotationIndex:
    """Each annotation key's value for each event: ``values[key][first[key][i]]`` is event
    ``i``'s (the last row of ``values[key]`` is null, for events without one; the keys of a
    type share one ``values`` series).

    A key's value for an event is its first row in the long table ``raw.annotations``, else the
    value the walker typed (``raw.int_values``, ``raw.str_values``: one per event and key at
    most). Event indices are dense, so the rows are found by a NumPy scatter (in reverse, so
    that the first row wins) and gathered once per frame: no hashing, no join, no table over
    all events (bench/NOTES.md, Perfetto ingest, eighth session and session 25).
    """

    n_events: int
    values: dict[str, pl.Series]
    first: dict[str, np.ndarray]  # uint32, n_events each

    def columns(self, idx: np.ndarray, keys: tuple[str, ...] = INT_KEYS + STR_KEYS
                ) -> list[pl.Series | pl.Expr]:
        """The ``keys`` columns of events ``idx`` (a key no event has: a null literal, which
        Polars keeps as one value)."""
        return [self.values[k].gather(self.first[k][idx]).alias(k) if k in self.values
                else pl.lit(None, pl.Int64 if k in INT_KEYS else pl.String).alias(k)
                for k in keys]


def annotation_index(raw: RawTables) -> AnnotationIndex:
    """Where each event's annotation values are (:class:`AnnotationIndex`)."""
    n_events = int(raw.events.select(pl.col("idx").max()).item() or 0) + 1
    annotations = raw.annotations
    idx = annotations["idx"].to_numpy()
    key = annotations["key"]
    in_long = set(key.unique().to_list())
    index = AnnotationIndex(n_events, {}, {})
    for typed, schema, names in ((raw.int_values, INT_VALUE_SCHEMA, INT_KEYS),
                                 (raw.str_values, STR_VALUE_SCHEMA, STR_KEYS)):
        typed = typed if typed is not None else pl.DataFrame(schema=schema)
        if names is INT_KEYS:
            value = pl.coalesce(pl.col("int_value"),
                                pl.col("str_value").cast(pl.Int64, strict=False))
        else:
            value = pl.coalesce(pl.col("str_value"), pl.col("int_value").cast(pl.String))
        # One column for the keys of a type: the walker's values, the long table's (typed as
        # the key's column), a null; each key's events point into it.
        values = pl.concat([typed["value"], annotations.select(value.alias("value"))["value"],
                            pl.Series("value", [None], dtype=schema["value"])])
        typed_idx = typed["idx"].to_numpy()
        typed_codes = typed["code"].to_numpy()
        codes = set(np.unique(typed_codes).tolist())
        for name in names:
            code = KEY_CODES.get(name, -1)
            if name not in in_long and code not in codes:
                continue
            first = np.full(n_events, len(values) - 1, dtype=np.uint32)
            if code in codes:
                own = np.flatnonzero((typed_codes == code) & (typed_idx < n_events))
                first[typed_idx[own]] = own
            if name in in_long:
                rows = np.flatnonzero((key == name).to_numpy() & (idx < n_events))[::-1]
                first[idx[rows]] = typed.height + rows  # in reverse: the first row wins
            index.values[name], index.first[name] = values, first
    return index


def annotation_columns(raw: RawTables) -> pl.DataFrame:
    """The annotations as one row per event index ``0 ..`` the largest (row ``i`` is event
    ``i``), one typed column per key present: what both decoders' tables say alike."""
    index = annotation_index(raw)
    keys = tuple(k for k in (*INT_KEYS, *STR_KEYS) if k in index.values)
    return pl.DataFrame(index.columns(np.arange(index.n_events), keys))


def _dense_ids(raw: RawTables) -> RawTables:
    """``raw`` with event indices that are dense enough to index arrays by: the decoders' are
    ``0 .. n - 1``; sparse ones (trace_processor's slice ids could be) are renumbered in order."""
    top = int(raw.events.select(pl.col("idx").max()).item() or 0)
    if top < 2 * raw.events.height + (1 << 20):
        return raw
    ids = raw.events.select(old=pl.col("idx").unique().sort()).with_row_index("new")
    renumber = pl.col("idx").replace_strict(ids["old"], ids["new"], default=None,
                                             return_dtype=pl.UInt32)
    events = raw.events.with_columns(renumber)
    def renumbered(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.with_columns(renumber).filter(pl.col("idx").is_not_null())

    return replace(raw, events=events, annotations=renumbered(raw.annotations),
                   int_values=None if raw.int_values is None else renumbered(raw.int_values),
                   str_values=None if raw.str_values is None else renumbered(raw.str_values))


def _with_annotations(frame: pl.DataFrame, ann: AnnotationIndex,
                      keys: tuple[str, ...] = INT_KEYS + STR_KEYS) -> pl.DataFrame:
    """``frame`` with the annotation columns ``keys`` of its events (``frame["idx"]``); a key
    that no event has is a null column (what a left join on ``idx`` gave)."""
    return frame.with_columns(ann.columns(frame["idx"].to_numpy(), keys))


def _first_int(expr: pl.Expr, index: int) -> pl.Expr:
    # "[1, 2, 3]" (Kineto's grid/block) -> the index-th number
    return expr.str.extract_all(r"-?\d+").list.get(index, null_on_oob=True).cast(pl.Int64)


def to_trace(raw: RawTables, meta: TraceMeta) -> Trace:
    """Build the canonical :class:`Trace` from decoded tables."""
    tracks = resolve_tracks(raw.tracks)
    raw = _dense_ids(raw)
    if raw.slice_pairs is not None:
        slices = paired_slices(raw.events, raw.slice_pairs)
        unended, orphan_ends = raw.unended, raw.orphan_ends
    else:
        slices, unended, orphan_ends = pair_slices(raw.events)
    complete = raw.events.filter(pl.col("type") == TYPE_COMPLETE)
    instants = raw.events.filter(pl.col("type") == TYPE_INSTANT)
    ann = annotation_index(raw)
    complete = (
        _with_annotations(complete, ann, ("_dur",))
        .with_columns(start_ns=pl.col("ts"),
                      # Clipped: a start within the time limit plus this cannot wrap; an end
                      # beyond the limit is dropped, counted, by ingest.bounds.check_trace.
                      end_ns=pl.col("ts") + pl.col("_dur").fill_null(0).clip(-TIME_LIMIT_NS,
                                                                             TIME_LIMIT_NS))
        .select(slices.columns)
    )
    if unended:
        meta.warnings.append(f"{unended} slices began but never ended (dropped)")
    if orphan_ends:
        meta.warnings.append(f"{orphan_ends} slice ends had no matching begin (ignored)")
    _read_meta_event(instants, ann, meta)

    ev = pl.concat([slices, complete]) if complete.height else slices
    # the tracks' columns looked up for the events alone, so that the events are not copied
    ev = ev.hstack(ev.select("track").join(tracks, left_on="track", right_on="uuid", how="left",
                                            maintain_order="left").drop("track"))
    ev = ev.with_columns(
        cat=pl.col("category").str.to_lowercase().fill_null(""),
        is_gpu_track=pl.col("is_gpu").fill_null(False),
    )
    is_gpu = pl.col("cat").is_in(GPU_CATS) | (
        ~pl.col("cat").is_in(HOST_CATS) & pl.col("is_gpu_track")
    )
    is_step = pl.col("name").str.contains(r"^ProfilerStep#\d+$")
    is_annotation = pl.col("cat").is_in(ANNOTATION_CATS) | is_step
    is_sync = pl.col("cat").is_in(SYNC_CATS)
    gpu_part, annotation_part, sync_part, cpu_part = 0, 1, 2, 4
    ev = ev.with_columns(
        part=pl.when(is_gpu)
        .then(gpu_part)
        .when(is_annotation)
        .then(annotation_part)
        .when(is_sync)
        .then(sync_part)
        .when(pl.col("cat").is_in(IGNORED_CATS))
        .then(3)
        .otherwise(cpu_part)
        .cast(pl.UInt8),
        pid=pl.col("track_pid"),
        tid=pl.col("track_tid"),
    )

    def part(code: int) -> pl.DataFrame:
        # annotations are gathered for each part's rows only (a key no event has stays a
        # literal, which a join of the whole would have written out for every row)
        return _with_annotations(ev.filter(pl.col("part") == code), ann).with_columns(
            rank=pl.coalesce(pl.col("rank"), pl.lit(meta.rank)))

    gpu = _gpu_frame(part(gpu_part), meta.warnings)
    cpu = _cpu_frame(part(cpu_part))
    annotations = _annotation_frame(part(annotation_part))
    syncs = _sync_frame(part(sync_part))
    counters = _counter_frame(raw.counters, tracks, meta.rank)
    _describe(meta, gpu, raw)
    return Trace(meta=meta, gpu=gpu, cpu=cpu, annotations=annotations, syncs=syncs,
                 counters=counters, memory=counter_memory(counters))


def _read_meta_event(instants: pl.DataFrame, ann: AnnotationIndex, meta: TraceMeta) -> None:
    rows = _with_annotations(instants.filter(pl.col("name") == META_EVENT), ann,
                             ("rank", "world_size"))
    if rows.height:
        first = rows.row(0, named=True)
        if first["rank"] is not None:
            meta.rank = int(first["rank"])
        if first["world_size"] is not None:
            meta.world_size = int(first["world_size"])


def _name_columns(names: pl.LazyFrame) -> pl.LazyFrame:
    """What a GPU activity's name says (copy or set, copy direction, memory kinds), once per
    distinct name: a trace repeats a few hundred names over millions of activities."""
    name = pl.col("name")
    name_l = name.str.to_lowercase()
    return names.with_columns(
        name_memcpy=name_l.str.contains("memcpy"),
        name_memset=name_l.str.contains("memset"),
        name_copy_kind=pl.coalesce(
            name.str.extract(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP)\b"),
            # AMD names copies "CopyHostToDevice"; rocprofv3 "MEMORY_COPY_HOST_TO_DEVICE"
            name_l.str.replace_all("_", "")
            .str.extract(r"(hosttodevice|devicetohost|devicetodevice|hosttohost|peertopeer)")
            .replace(
                {
                    "hosttodevice": "HtoD",
                    "devicetohost": "DtoH",
                    "devicetodevice": "DtoD",
                    "hosttohost": "HtoH",
                    "peertopeer": "PtoP",
                }
            ),
        ),
        # Kineto names copies "Memcpy HtoD (Pageable -> Device)"
        name_src_kind=name.str.extract(r"\((\w+)\s*->").str.to_lowercase(),
        name_dst_kind=name.str.extract(r"->\s*(\w+)\)").str.to_lowercase(),
    )


def _gpu_frame(ev: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    lazy = ev.lazy()
    lazy = lazy.join(_name_columns(lazy.select("name").unique()), on="name", how="left",
                     nulls_equal=True, maintain_order="left")
    kind = (
        pl.when(pl.col("cat").is_in(GPU_KERNEL_CATS))
        .then(pl.lit("kernel"))
        .when(pl.col("cat").is_in(GPU_MEMCPY_CATS) | pl.col("name_memcpy"))
        .then(pl.lit("memcpy"))
        .when(pl.col("cat").is_in(GPU_MEMSET_CATS) | pl.col("name_memset"))
        .then(pl.lit("memset"))
        .when(pl.col("is_copy").fill_null(False))
        .then(pl.lit("memcpy"))
        .otherwise(pl.lit("kernel"))
    )
    agent_device = pl.col("agent").str.extract(r"(\d+)\s*$").cast(pl.Int64, strict=False)
    copy_kind = pl.coalesce(
        pl.col("copy_kind").cast(pl.Enum(COPY_KINDS), strict=False).cast(pl.String),
        pl.col("kind_arg").cast(pl.Enum(COPY_KINDS), strict=False).cast(pl.String),
        pl.col("name_copy_kind"),
    )
    frame = lazy.with_columns(kind=kind).with_columns(
        device=pl.coalesce("device", "track_device", agent_device),
        stream=pl.coalesce("stream", "track_stream", "queue"),
        correlation=pl.coalesce("correlation", pl.col("flow").cast(pl.Int64, strict=False)),
        grid_x=pl.coalesce("grid_x", _first_int(pl.col("grid"), 0)),
        grid_y=pl.coalesce("grid_y", _first_int(pl.col("grid"), 1)),
        grid_z=pl.coalesce("grid_z", _first_int(pl.col("grid"), 2)),
        block_x=pl.coalesce("block_x", _first_int(pl.col("block"), 0)),
        block_y=pl.coalesce("block_y", _first_int(pl.col("block"), 1)),
        block_z=pl.coalesce("block_z", _first_int(pl.col("block"), 2)),
        bytes=pl.when(pl.col("kind") != "kernel").then(pl.col("bytes")),
        copy_kind=pl.when(pl.col("kind") == "memcpy").then(copy_kind),
        src_kind=pl.when(pl.col("kind") != "kernel").then(
            pl.coalesce(pl.col("src_kind"), pl.col("name_src_kind"))),
        dst_kind=pl.when(pl.col("kind") != "kernel").then(
            pl.coalesce(pl.col("dst_kind"), pl.col("name_dst_kind"))),
        graph_launched=pl.col("graph_launched").cast(pl.Boolean),
    )
    # The canonical category, once per distinct (kind, name); it replaces the producer's.
    pairs = frame.select("kind", "name").unique()
    activity = pairs.with_columns(activity=activity_category(pl.col("kind"), pl.col("name")))
    frame = frame.join(activity, on=["kind", "name"], how="left", nulls_equal=True,
                       maintain_order="left").with_columns(category=pl.col("activity"))
    canonical = conform(frame.collect(engine=COLLECT_ENGINE), "gpu")
    # Same rule as the Kineto reader: identical GPU rows are producer artifacts. Duplicates
    # share these five numbers, so the whole-row comparison runs only when some do.
    deduped = canonical
    if canonical.select("start_ns", "end_ns", "device", "stream", "correlation").is_duplicated().any():
        deduped = canonical.unique(maintain_order=True)
    if deduped.height < canonical.height:
        warnings.append(f"dropped {canonical.height - deduped.height} duplicate GPU events")
    return deduped.sort("start_ns", "device", "stream", maintain_order=True)


def _cpu_frame(ev: pl.DataFrame) -> pl.DataFrame:
    name = pl.col("name")
    kind = (
        pl.when(pl.col("cat").is_in(CPU_CAT_KIND))
        .then(pl.col("cat").replace_strict(CPU_CAT_KIND, default=None))
        .when(name.str.contains(r"^(?:cuda|hip)[A-Z_]"))
        .then(pl.lit("runtime"))
        .when(name.str.contains(r"^(?:cu[A-Z]|hsa_)"))
        .then(pl.lit("driver"))
        .otherwise(pl.lit("op"))
    )
    frame = ev.with_columns(kind=kind).with_columns(
        correlation=pl.coalesce(
            "correlation",
            pl.when(pl.col("kind").is_in(API_KINDS)).then(
                pl.col("flow").cast(pl.Int64, strict=False)
            ),
        ),
    )
    return conform(frame.sort("start_ns", "pid", "tid"), "cpu")


def _annotation_frame(ev: pl.DataFrame) -> pl.DataFrame:
    step = pl.col("name").str.extract(r"^ProfilerStep#(\d+)$").cast(pl.Int64)
    kind = (
        pl.when(pl.col("cat") == "gpu_user_annotation")
        .then(pl.lit("gpu_user"))
        .when(step.is_not_null())
        .then(pl.lit("step"))
        .when(pl.col("cat").is_in(["marker_api", "nvtx", "roctx"]))
        .then(pl.lit("nvtx"))
        .otherwise(pl.lit("user"))
    )
    frame = ev.with_columns(
        kind=kind,
        step=step,
        domain=pl.coalesce(
            "domain", pl.when(pl.col("cat") == "marker_api").then(pl.lit("roctx"))
        ),
    )
    return conform(frame.sort("start_ns"), "annotations")


def _sync_frame(ev: pl.DataFrame) -> pl.DataFrame:
    frame = ev.with_columns(
        device=pl.coalesce("device", "track_device"),
        stream=pl.coalesce("stream", "track_stream"),
        sync_type=pl.coalesce("sync_type", "name"),
        tid=pl.when(~pl.col("is_gpu_track")).then(pl.col("tid")),
    )
    return conform(frame.sort("start_ns"), "syncs")


def _counter_frame(counters: pl.DataFrame, tracks: pl.DataFrame, rank: int) -> pl.DataFrame:
    frame = counters.join(tracks, left_on="track", right_on="uuid", how="left").select(
        rank=pl.lit(rank),
        pid=pl.col("track_pid"),
        device=pl.when(pl.col("is_gpu")).then(pl.col("track_device")),
        name=pl.col("track_name").fill_null("<unnamed counter>"),
        ts_ns=pl.col("ts"),
        value=pl.col("value"),
    )
    return conform(frame.sort("ts_ns"), "counters")


def _describe(meta: TraceMeta, gpu: pl.DataFrame, raw: RawTables) -> None:
    cats = set(raw.events["category"].drop_nulls().unique().to_list())
    rocprof = bool(cats & set(ROCPROF_CATS))
    if meta.profiler is None:
        meta.profiler = "rocprofv3 (Perfetto)" if rocprof else "Perfetto TrackEvent"
    names = raw.events["name"].drop_nulls()
    vendor = None
    if rocprof or names.str.contains(r"^hip[A-Z]").any():
        vendor = "amd"
    elif names.str.contains(r"^cuda[A-Z]").any():
        vendor = "nvidia"
    if not meta.devices:
        ids = sorted(gpu["device"].drop_nulls().unique().to_list())
        meta.devices = [Device(id=int(i), vendor=vendor) for i in ids]
    meta.extra.setdefault("perfetto_packets", raw.packets)
