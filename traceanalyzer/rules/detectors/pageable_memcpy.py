"""pageable-memcpy: copies from or to pageable host memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    attach_source,
    ms,
    origin,
    own_rank,
    pct,
    window_length,
)
from traceanalyzer.rules.detectors._sync import EVIDENCE_SOURCES, overlap_lost, wait_totals

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("min_impact_pct",),
    fields=("copy_count", "copy_ms", "waited_ms", "idle_after_ms", "lost_ms", "htod_ms",
            "exposed_htod_ms", "bytes_mb", "top_op"),
)
def pageable_memcpy(views: Views, p: Params) -> Detection | None:
    """Copies from or to pageable host memory (Nsight's cuda_memcpy_async: they are not really
    asynchronous). A host-to-device copy from pageable memory can make its call wait for the
    stream to drain; its cost is the copy plus the overlap of CPU and GPU work that wait lost
    (see ``overlap_lost``); fires when that is at least ``min_impact_pct`` of the window."""
    launches = own_rank(views, views.launches)
    copies = launches.filter(pl.col("kind") == "memcpy")
    if copies.height == 0:
        return None
    if copies["src_kind"].null_count() == copies.height and copies["dst_kind"].null_count() == copies.height:
        raise NotApplicable("the memory kinds of copies (pageable or pinned) were not recorded")
    is_pageable = (pl.col("src_kind") == "pageable") | (pl.col("dst_kind") == "pageable")
    pageable = copies.filter(is_pageable).with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns")
    ).with_row_index("_copy")
    if pageable.height == 0:
        return None
    # Only host-to-device copies are charged with a wait: device-to-host reads (.item(), .cpu())
    # are syncs, which hidden-sync charges. A small pageable copy is staged by the driver and its
    # call returns at once (CUDA's "API synchronization behavior"): its call's span holds no GPU
    # work, so it lost nothing. The copies themselves are left out of the GPU work waited for.
    htod = (pl.col("copy_kind") == "HtoD") & pl.col("launch_end_ns").is_not_null()
    calls = pageable.filter(htod).select(
        "_copy", "rank", pl.col("launch_start_ns").alias("wait_from"),
        pl.col("launch_end_ns").alias("end_ns"),
    )
    # The GPU work waited for, as overlap_lost reads it (ranks and times; a copy of every
    # column of the view was this rule's peak: bench/NOTES.md, "nsys pages").
    work = launches.select("rank", "start_ns", "end_ns", "src_kind", "dst_kind", "copy_kind").filter(
        ~(is_pageable & (pl.col("copy_kind") == "HtoD")).fill_null(False))
    calls = overlap_lost(views, calls, work)
    pageable = pageable.join(
        calls.select("_copy", "waited_ns", "gpu_idle_after_ns", "lost_ns", "_gap"),
        on="_copy", how="left",
    ).drop("_copy").with_columns(pl.col("waited_ns", "gpu_idle_after_ns", "lost_ns").fill_null(0))
    lost = int(pageable["lost_ns"].sum() or 0)
    total = int(pageable["dur"].sum())
    window = window_length(views)
    if not window or pct(total + lost, window) < p["min_impact_pct"]:
        return None
    waited, idle_after = wait_totals(pageable)
    # Exposed: the part of a copy during which no kernel runs, i.e. on the critical path.
    kernels = launches.filter(pl.col("kind") == "kernel").select("rank", "start_ns", "end_ns")
    pageable = intervals.overlap_ns(pageable, kernels, name="covered_ns").with_columns(
        exposed_ns=pl.col("dur") - pl.col("covered_ns")
    )
    htod_copies = pageable.filter(pl.col("copy_kind") == "HtoD")
    ops = pageable.filter(pl.col("op_name").is_not_null()).group_by("op_name").agg(
        pl.col("dur").sum()
    ).sort(["dur", "op_name"], descending=[True, False])
    top = pageable.sort(pl.col("dur") + pl.col("lost_ns"), descending=True).head(EVIDENCE_SOURCES)
    top = attach_source(
        top.with_columns(pl.coalesce("launch_start_ns", "start_ns").alias("_ls"),
                         pl.coalesce("launch_end_ns", "end_ns").alias("_le"),
                         pl.col("launch_tid").alias("tid")),
        views.cpu, start="_ls", end="_le",
    )
    evidence = top.select(
        "start_ns", "end_ns", "name", "copy_kind", "src_kind", "dst_kind", "bytes", "stream",
        pl.col("launch_name").alias("api"), pl.col("op_name").alias("op"),
        (pl.col("dur") / NS_PER_US).alias("duration_us"),
        (pl.col("exposed_ns") / NS_PER_US).alias("exposed_us"),
        (pl.col("waited_ns") / NS_PER_US).alias("waited_us"),
        (pl.col("gpu_idle_after_ns") / NS_PER_US).alias("gpu_idle_after_us"),
        (pl.col("lost_ns") / NS_PER_US).alias("lost_us"), "source",
    )
    return Detection(
        impact_ns=total + lost,
        fields={
            "copy_count": pageable.height,
            "copy_ms": ms(total),
            "waited_ms": ms(waited),
            "idle_after_ms": ms(idle_after),
            "lost_ms": ms(lost),
            "htod_ms": ms(htod_copies["dur"].sum()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "exposed_htod_ms": ms(htod_copies["exposed_ns"].sum()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "bytes_mb": float(pageable["bytes"].sum() or 0) / 1e6,
            "top_op": ops["op_name"][0] if ops.height else origin(views, pageable["launch_name"]),
        },
        evidence=evidence,
    )
