"""What every reader's memory frame shares: the operator around each event, the totals of a
driver's allocations.

Both are Polars joins over sorted frames (as-of joins, no per-event Python), so they stay linear
in the trace (docs/complexity.md).
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.model import COLLECT_ENGINE, conform, empty_frame

_KEYS = ["pid", "tid"]

#: CUDA/HIP runtime and driver calls that allocate or free device or pinned host memory, by their
#: name without version suffix. Each can synchronise the device (cudaFree always does).
ALLOCATION_APIS = (
    "cudaMalloc",
    "cudaFree",
    "cudaMallocAsync",
    "cudaFreeAsync",
    "cudaMallocManaged",
    "cudaMallocPitch",
    "cudaMalloc3D",
    "cudaMallocHost",
    "cudaFreeHost",
    "cudaHostAlloc",
    "cudaMallocFromPoolAsync",
    "cuMemAlloc",
    "cuMemAlloc_v2",
    "cuMemFree",
    "cuMemFree_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "hipMalloc",
    "hipFree",
    "hipMallocAsync",
    "hipFreeAsync",
    "hipHostMalloc",
    "hipHostFree",
)

#: Operators that only make a tensor: an allocation inside one is charged to the operator that
#: called it (``aten::mm`` rather than the ``aten::empty_strided`` it made its output with).
FACTORY_OPERATORS = (
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::new_empty",
    "aten::new_empty_strided",
)


def innermost_operator(events: pl.DataFrame, cpu: pl.DataFrame) -> pl.Series:
    """The name of the innermost framework operator (``cpu.kind == "op"``, factories aside) open
    on the event's thread at its ``ts_ns``, null where none is; in the order of ``events``.

    Operators on one thread nest, so the open one at depth d is the last one of depth d that
    started before the event: the depth at any time is the running count of starts minus ends
    on the thread (an as-of join), and a second as-of join by depth finds the operator.
    """
    ops = (
        cpu.lazy()
        .filter(
            pl.col("kind") == "op",
            pl.col("pid").is_not_null(),
            pl.col("tid").is_not_null(),
            ~pl.col("name").is_in(FACTORY_OPERATORS),
        )
        .select(*_KEYS, "name", "start_ns", "end_ns")
        .collect(engine=COLLECT_ENGINE)
    )
    # Only numbers go through the sorts and joins (an operator's row stands for its name, which
    # is gathered for the events at the end): the names' views through a sort of twice the
    # operators were the largest allocation of a 1 GB trace's read (bench/NOTES.md).
    spans = ops.lazy().select(*_KEYS, "start_ns", "end_ns").with_row_index("_op")
    # Ends before starts at one time (end_ns is exclusive); among starts at one time the outer
    # (later end) first, among ends the inner (later start) first.
    bounds = (
        pl.concat(
            [
                spans.select(
                    *_KEYS,
                    "_op",
                    t="start_ns",
                    step=pl.lit(1, pl.Int8),
                    o=pl.lit(1, pl.Int8),
                    tie=-pl.col("end_ns"),
                ),
                spans.select(
                    *_KEYS,
                    _op=pl.lit(None, pl.UInt32),
                    t="end_ns",
                    step=pl.lit(-1, pl.Int8),
                    o=pl.lit(0, pl.Int8),
                    tie=-pl.col("start_ns"),
                ),
            ]
        )
        .sort(*_KEYS, "t", "o", "tie")
        .with_columns(depth=pl.col("step").cast(pl.Int64).cum_sum().over(_KEYS))
    )
    named = bounds.filter(pl.col("o") == 1).select(
        *_KEYS, "depth", "_op", start_ns="t", end_ns=-pl.col("tie")
    )
    # The depth after the last bound at each time of a thread: ``bounds`` is sorted by thread
    # and time, so that is the row before a change of either (a hash group-by of every bound was
    # the largest allocation of this step).
    last = pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(-1)) for c in (*_KEYS, "t"))
    depth_at = bounds.filter(last).select(*_KEYS, "t", "depth").sort("t")
    ev = events.lazy().select(*_KEYS, "ts_ns").with_row_index("_i")
    found = (
        ev.sort("ts_ns")
        .join_asof(
            depth_at,
            left_on="ts_ns",
            right_on="t",
            by=_KEYS,
            strategy="backward",
            check_sortedness=False,
        )
        .join_asof(
            named.sort("start_ns"),
            left_on="ts_ns",
            right_on="start_ns",
            by=[*_KEYS, "depth"],
            strategy="backward",
            check_sortedness=False,
        )
        .select("_i", _op=pl.when(pl.col("end_ns") > pl.col("ts_ns")).then("_op"))
        .sort("_i")
    )
    rows = found.collect(engine=COLLECT_ENGINE).get_column("_op")
    return ops.get_column("name").gather(rows).alias("operator")


#: ``reserved_bytes`` of driver allocation rows sorted by time: the running sum of each device's
#: bytes (a pinned host buffer, ``device`` null, counts on none).
DRIVER_RESERVED = pl.when(pl.col("device").is_not_null()).then(
    pl.col("bytes").cum_sum().over("rank", "device")
)


#: Counter tracks that hold a GPU's memory in use: Perfetto's ``GPU Memory`` (Android's
#: gpu_mem_total), ``gpu_memory``, ``mem.gpu`` and the like.
GPU_MEMORY_COUNTER = r"(?i)^(gpu[ _.]?mem(ory)?( total| usage| used)?|mem\.gpu)$"


def counter_memory(counters: pl.DataFrame) -> pl.DataFrame:
    """Driver memory rows from a trace's GPU memory counters (a counters frame): each sample's
    value as ``reserved_bytes``, its change as ``bytes``; on device 0 where the counter names
    none."""
    rows = counters.filter(pl.col("name").str.contains(GPU_MEMORY_COUNTER))
    if rows.is_empty():
        return empty_frame("memory")
    rows = (
        rows.sort("ts_ns")
        .select(
            "rank",
            "pid",
            "ts_ns",
            device=pl.col("device").fill_null(0),
            source=pl.lit("driver"),
            reserved_bytes=pl.col("value").round().cast(pl.Int64),
        )
        .with_columns(bytes=pl.col("reserved_bytes").diff().over("rank", "device"))
    )
    return conform(rows, "memory")
