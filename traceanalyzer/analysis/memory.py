"""Device memory over the window: the peaks, when and in which step they happened, who held the
memory then, and the timeline the reports draw (docs/metrics.md, "Device memory").

Two kinds of rows feed it (``memory.source``): the caching allocator's events (torch.profiler's
``[memory]``), which carry its totals allocated and reserved after each event, and the driver's
allocations (Nsight Systems' ``CUDA_GPU_MEMORY_USAGE_EVENTS``), whose running total is what the
process holds from the driver: the allocator's reserved memory plus what other libraries
allocated themselves. A device's reserved peak is the allocator's where it has rows, else the
driver's.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.model import TraceMeta

#: Points of the timeline the reports draw: the window in this many buckets, each keeping its
#: highest allocated and reserved totals, so no peak is averaged away.
TIMELINE_BUCKETS = 600
#: Operators named as holding memory at the peak.
TOP_HOLDERS = 5
#: The holder of memory allocated before the window (weights, optimizer state made earlier).
BEFORE_WINDOW = "(allocated before the window)"
OUTSIDE_OPERATORS = "(outside any operator)"
#: The live allocations of the operators past the top ones, so that the rows add up to the peak.
OTHER_OPERATORS = "(other operators)"

SUMMARY_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "device": pl.Int32,
        "source": pl.String,
        "peak_allocated_bytes": pl.Int64,
        "peak_allocated_ns": pl.Int64,
        "peak_allocated_step": pl.Int64,
        "peak_allocated_pct": pl.Float64,
        "peak_reserved_bytes": pl.Int64,
        "peak_reserved_ns": pl.Int64,
        "peak_reserved_step": pl.Int64,
        "peak_reserved_pct": pl.Float64,
        "capacity_bytes": pl.Int64,
        "events": pl.Int64,
    }
)
HOLDER_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "device": pl.Int32,
        "operator": pl.String,
        "bytes": pl.Int64,
        "allocations": pl.Int64,
        "pct_of_peak": pl.Float64,
    }
)
TIMELINE_SCHEMA = pl.Schema(
    {"ts_ns": pl.Int64, "allocated_bytes": pl.Int64, "reserved_bytes": pl.Int64}
)


def _rows(memory: pl.DataFrame) -> pl.DataFrame:
    """Device rows, with ``reserved`` the total the device's peak is read from."""
    mem = memory.filter(pl.col("device").is_not_null())
    has_allocator = (pl.col("source") == "allocator").any().over("rank", "device")
    return mem.filter(~has_allocator | (pl.col("source") == "allocator")).sort("ts_ns")


def _step_at(frame: pl.DataFrame, at: str, steps: pl.DataFrame) -> pl.Series:
    """The step whose wall-clock range holds ``frame[at]`` (null outside every step)."""
    if steps.is_empty() or frame.is_empty():
        return pl.Series(at, [None] * frame.height, dtype=pl.Int64)
    marks = steps.select(pl.col("rank").cast(pl.Int32), "step", _s="start_ns", _e="end_ns").sort(
        "_s"
    )
    out = (
        frame.select("rank", at)
        .with_row_index("_i")
        .sort(at)
        .join_asof(
            marks, left_on=at, right_on="_s", by="rank", strategy="backward", check_sortedness=False
        )
        .sort("_i")
        .select(pl.when(pl.col(at) < pl.col("_e")).then("step"))
    )
    return out.to_series()


def memory_summary(memory: pl.DataFrame, steps: pl.DataFrame, meta: TraceMeta) -> pl.DataFrame:
    """Per (rank, device): the peaks allocated and reserved, when, in which step, and in % of
    the device's memory (``TraceMeta.devices``)."""
    mem = _rows(memory)
    if mem.is_empty():
        return pl.DataFrame(schema=SUMMARY_SCHEMA)
    peaks = (
        mem.group_by("rank", "device", maintain_order=True)
        .agg(
            source=pl.col("source").cast(pl.String).first(),
            peak_allocated_bytes=pl.col("allocated_bytes").max(),
            peak_allocated_ns=pl.col("ts_ns").get(pl.col("allocated_bytes").arg_max()),
            peak_reserved_bytes=pl.col("reserved_bytes").max(),
            peak_reserved_ns=pl.col("ts_ns").get(pl.col("reserved_bytes").arg_max()),
            events=pl.len().cast(pl.Int64),
        )
        .with_columns(
            peak_allocated_ns=pl.when(pl.col("peak_allocated_bytes").is_not_null()).then(
                "peak_allocated_ns"
            ),
            peak_reserved_ns=pl.when(pl.col("peak_reserved_bytes").is_not_null()).then(
                "peak_reserved_ns"
            ),
        )
    )
    capacity = {d.id: d.memory_bytes for d in meta.devices if d.memory_bytes}
    peaks = peaks.with_columns(
        capacity_bytes=pl.col("device").replace_strict(
            list(capacity), list(capacity.values()), default=None, return_dtype=pl.Int64
        )
        if capacity
        else pl.lit(None, pl.Int64),
        peak_allocated_step=_step_at(peaks, "peak_allocated_ns", steps),
        peak_reserved_step=_step_at(peaks, "peak_reserved_ns", steps),
    ).with_columns(
        peak_allocated_pct=100.0 * pl.col("peak_allocated_bytes") / pl.col("capacity_bytes"),
        peak_reserved_pct=100.0 * pl.col("peak_reserved_bytes") / pl.col("capacity_bytes"),
    )
    return peaks.select(list(SUMMARY_SCHEMA)).cast(SUMMARY_SCHEMA).sort("rank", "device")


def holders_at_peak(
    memory: pl.DataFrame, summary: pl.DataFrame, top: int = TOP_HOLDERS
) -> pl.DataFrame:
    """Per (rank, device): the operators whose allocations were still live at the allocated
    peak, by bytes, the ``top`` of them, then the other operators' together and what was
    allocated before the window: the rows add up to the peak.

    An allocation is live at the peak when it happened at or before it and the next free of
    its address (an as-of join) came after it, or never.
    """
    mem = memory.filter(
        pl.col("source") == "allocator",
        pl.col("device").is_not_null(),
        pl.col("address").is_not_null(),
        pl.col("bytes").is_not_null(),
    )
    at = summary.filter(pl.col("peak_allocated_ns").is_not_null()).select(
        "rank", "device", _peak="peak_allocated_ns", _peak_bytes="peak_allocated_bytes"
    )
    if mem.is_empty() or at.is_empty():
        return pl.DataFrame(schema=HOLDER_SCHEMA)
    keys = ["rank", "device", "address"]
    frees = mem.filter(pl.col("bytes") < 0).select(*keys, _free="ts_ns").sort("_free")
    live = (
        mem.filter(pl.col("bytes") > 0)
        .sort("ts_ns")
        .join_asof(
            frees,
            left_on="ts_ns",
            right_on="_free",
            by=keys,
            strategy="forward",
            check_sortedness=False,
        )
        .join(at, on=["rank", "device"], how="inner")
        .filter(
            pl.col("ts_ns") <= pl.col("_peak"),
            pl.col("_free").is_null() | (pl.col("_free") > pl.col("_peak")),
        )
        .with_columns(operator=pl.col("operator").fill_null(OUTSIDE_OPERATORS))
    )
    ranked = (
        live.group_by("rank", "device", "operator")
        .agg(bytes=pl.col("bytes").sum(), allocations=pl.len().cast(pl.Int64))
        # Ties by name: group_by's order is arbitrary, and the report must not change between runs.
        .sort(["bytes", "operator"], descending=[True, False])
        .group_by("rank", "device", maintain_order=True)
        .head(top)
    )
    held = live.group_by("rank", "device").agg(_held=pl.col("bytes").sum())
    shown = ranked.group_by("rank", "device").agg(_shown=pl.col("bytes").sum())
    none = pl.lit(None, pl.Int64)
    rest = (
        held.join(shown, on=["rank", "device"], how="left")
        .select(
            "rank",
            "device",
            operator=pl.lit(OTHER_OPERATORS),
            bytes=pl.col("_held") - pl.col("_shown").fill_null(0),
            allocations=none,
        )
        .filter(pl.col("bytes") > 0)
    )
    before = (
        at.join(held, on=["rank", "device"], how="left")
        .select(
            "rank",
            "device",
            operator=pl.lit(BEFORE_WINDOW),
            bytes=pl.col("_peak_bytes") - pl.col("_held").fill_null(0),
            allocations=none,
        )
        .filter(pl.col("bytes") > 0)
    )
    out = pl.concat(
        [f.cast({"bytes": pl.Int64}) for f in (ranked, rest, before)], how="vertical_relaxed"
    )
    return (
        out.join(at, on=["rank", "device"])
        .with_columns(pct_of_peak=100.0 * pl.col("bytes") / pl.col("_peak_bytes"))
        .select(list(HOLDER_SCHEMA))
        .cast(HOLDER_SCHEMA)
    )


def memory_timeline(
    memory: pl.DataFrame, rank: int, device: int | None, buckets: int = TIMELINE_BUCKETS
) -> pl.DataFrame:
    """One device's totals over time, at most ``buckets`` points (each bucket's highest totals
    at its last event), for the reports' chart."""
    mem = _rows(memory).filter(pl.col("rank") == rank, pl.col("device") == device)
    if mem.is_empty():
        return pl.DataFrame(schema=TIMELINE_SCHEMA)
    lo, hi = mem["ts_ns"].min(), mem["ts_ns"].max()
    width = max(1, (int(hi) - int(lo)) // buckets + 1)  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    return (
        mem.group_by(((pl.col("ts_ns") - lo) // width).alias("_b"))
        .agg(
            pl.col("ts_ns").last(), pl.col("allocated_bytes").max(), pl.col("reserved_bytes").max()
        )
        .sort("_b")
        .select(list(TIMELINE_SCHEMA))
        .cast(TIMELINE_SCHEMA)
    )


def headline(summary: pl.DataFrame, rank: int) -> dict[str, Any] | None:
    """The headline rank's device with the highest peak: a row of :func:`memory_summary`."""
    rows = summary.filter(pl.col("rank") == rank)
    if rows.is_empty():
        return None
    order = pl.coalesce("peak_allocated_bytes", "peak_reserved_bytes")
    return rows.sort(order, descending=True, nulls_last=True).row(0, named=True)
