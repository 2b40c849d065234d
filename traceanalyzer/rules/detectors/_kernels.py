"""What the kernel rules share: Nsight Compute's launches, judged against their roofline and
matched to the timeline.

:func:`judged` adds to ``kernel_metrics`` (one row per profiled launch):

- ``compute_pct``: the busiest FLOP pipe (FP32, FP64, FP16 or tensor) as % of its peak;
  ``memory_pct``: DRAM bandwidth as % of its peak. Their times (``compute_ns``,
  ``memory_ns``: the duration x the %) are the kernel's time at each roof; ``bound_ns``, the
  larger, is its time at the roofline bound, and ``bound`` says which ("compute" or "memory").
- ``roofline_pct``: ``bound_ns`` / duration. A kernel is **near its roofline**
  (:data:`NEAR_ROOFLINE_PCT`) when it reaches 80% of it, or, compute-bound, when an SM pipe is
  80% busy (Nsight Compute's SM Speed of Light: a kernel bound by integer or load/store issue
  is at its compute roof too). Memory-bound kernels are judged by DRAM alone: an L1 or L2 made
  busy by bank conflicts or uncoalesced sectors is waste, not a roof. A kernel near its
  roofline is reported as such (``verdict``) and no kernel rule judges it.
- ``waves``: blocks / (blocks a SM holds x SMs), exact (Nsight Compute prints 2 decimals).
- ``timeline_ns``, ``timeline_launches``: the time and launches of the same kernel in the
  analyzed timeline (same :func:`~traceanalyzer.ingest.ncu.csvpage.function_name`, grid and
  block; shared among the profiled launches of that key). A rule's impact is each kernel's
  lost share of its Nsight Compute duration times ``timeline_ns``: the time the timeline would
  save. For a report analyzed alone, the timeline is its launches back to back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import NotApplicable

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: A kernel at this share of its roofline (or, compute-bound, with an SM pipe this busy) is near
#: it: Nsight Compute's own "Speed of Light" rule calls 80% of peak good utilisation.
NEAR_ROOFLINE_PCT = 80.0
KEY = ["function", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
NO_METRICS = (
    "no Nsight Compute kernel metrics (analyze an .ncu-rep or its CSV page, or pass "
    "--kernel-metrics FILE)"
)


def judged(views: Views) -> pl.DataFrame:
    """``kernel_metrics`` with the roofline, the verdict and the timeline time (module doc)."""
    km = views.kernel_metrics
    if km.is_empty():
        raise NotApplicable(NO_METRICS)
    c = pl.col
    dur = c("duration_ns").cast(pl.Float64)
    compute_pct = pl.max_horizontal(
        "fp32_pipe_pct", "fp64_pipe_pct", "fp16_pipe_pct", "tensor_pipe_pct"
    )
    memory_pct = pl.coalesce(
        "dram_throughput_pct", 100 * c("dram_bytes_per_s") / c("dram_peak_bytes_per_s")
    )
    blocks = c("grid_x").cast(pl.Int64) * c("grid_y") * c("grid_z")
    per_sm = pl.min_horizontal(
        "block_limit_registers",
        "block_limit_shared_mem",
        "block_limit_warps",
        "block_limit_sm",
        "block_limit_barriers",
    )
    out = (
        km.filter(c("duration_ns") > 0)
        .with_columns(
            compute_ns=dur * compute_pct.fill_null(0) / 100,
            memory_ns=dur * memory_pct.fill_null(0) / 100,
            waves=blocks / (per_sm.cast(pl.Float64) * c("sm_count")),
        )
        .with_columns(
            bound_ns=pl.max_horizontal("compute_ns", "memory_ns"),
            bound=pl.when(c("compute_ns") >= c("memory_ns"))
            .then(pl.lit("compute"))
            .otherwise(pl.lit("memory")),
        )
        .with_columns(roofline_pct=100 * c("bound_ns") / dur)
    )
    near = (c("roofline_pct") >= NEAR_ROOFLINE_PCT) | (
        (c("bound") == "compute") & (c("sm_throughput_pct") >= NEAR_ROOFLINE_PCT)
    )
    out = out.with_columns(near_roofline=near.fill_null(False))
    pct = c("roofline_pct").round(0).cast(pl.Int64)
    out = out.with_columns(
        verdict=pl.when(c("roofline_pct") >= NEAR_ROOFLINE_PCT)
        .then(pl.format("near its {} roofline ({}%)", "bound", pct))
        .when("near_roofline")
        .then(
            pl.format(
                "at its compute roof: SM {}% busy ({}% of the FLOP roofline)",
                c("sm_throughput_pct").round(0).cast(pl.Int64),
                pct,
            )
        )
        .otherwise(pl.format("{}-bound at {}% of its roofline", "bound", pct))
    )
    return _with_timeline(out, views)


def _with_timeline(km: pl.DataFrame, views: Views) -> pl.DataFrame:
    from traceanalyzer.ingest.ncu.csvpage import function_name

    gpu = views.gpu.filter(pl.col("kind") == "kernel")
    per_name = gpu.group_by("name", *KEY[1:]).agg(
        timeline_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(), timeline_launches=pl.len()
    )
    names = per_name["name"].unique().to_list()  # distinct names: a few hundred at most
    fn = {n: function_name(n) for n in names if n is not None}
    per_key = (
        per_name.with_columns(function=pl.col("name").replace_strict(fn, default=None))
        .group_by(KEY)
        .agg(pl.col("timeline_ns").sum(), pl.col("timeline_launches").sum())
    )
    out = km.join(per_key, on=KEY, how="left", nulls_equal=True)
    shared = pl.len().over(KEY)
    return out.with_columns(
        timeline_ns=(pl.col("timeline_ns").fill_null(0) / shared).cast(pl.Int64),
        timeline_launches=pl.col("timeline_launches").fill_null(0),
    ).sort("id")


def judged_or_none(views: Views) -> pl.DataFrame | None:
    """:func:`judged`, or None without kernel metrics (for reports, which do not abstain)."""
    try:
        return judged(views)
    except NotApplicable:
        return None


def candidates(views: Views) -> pl.DataFrame:
    """The launches a kernel rule judges: those not near their roofline."""
    return judged(views).filter(~pl.col("near_roofline"))


def impact(found: pl.DataFrame) -> int:
    """The time the timeline would save: each kernel's ``lost_ns`` (of its Nsight Compute
    duration) as a share of its timeline time."""
    share = (pl.col("lost_ns") / pl.col("duration_ns")).clip(0, 1)
    return int(found.select((share * pl.col("timeline_ns")).sum()).item() or 0)


def evidence(found: pl.DataFrame, *cols: str | pl.Expr) -> pl.DataFrame:
    """Evidence rows: the kernel, its launch, its figures, what it loses, most costly first."""
    share = (pl.col("lost_ns") / pl.col("duration_ns")).clip(0, 1)
    return (
        found.with_columns(impact_ns=(share * pl.col("timeline_ns")).cast(pl.Int64))
        .sort(["impact_ns", "lost_ns"], descending=True)
        .select(
            pl.col("name").alias("kernel"),
            pl.format("({}, {}, {})", "grid_x", "grid_y", "grid_z").alias("grid"),
            pl.format("({}, {}, {})", "block_x", "block_y", "block_z").alias("block"),
            (pl.col("duration_ns") / 1e3).alias("ncu_us"),
            *cols,
            pl.col("roofline_pct"),
            (pl.col("lost_ns") / 1e3).alias("lost_us"),
            (pl.col("timeline_ns") / 1e3).alias("timeline_us"),
            (pl.col("impact_ns") / 1e3).alias("impact_us"),
        )
    )


def fire(found: pl.DataFrame, views: Views, min_impact_pct: float) -> int | None:
    """The impact when ``found`` has a kernel and it reaches ``min_impact_pct`` of the window."""
    if found.is_empty():
        return None
    from traceanalyzer.rules.detectors._common import window_length

    lost = impact(found)
    window = window_length(views)
    if window and 100 * lost / window < min_impact_pct:
        return None
    return lost
