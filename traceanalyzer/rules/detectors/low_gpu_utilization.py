"""low-gpu-utilization: most time chunks of the window with little GPU activity (Nsight
Systems' ``gpu_time_util``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, ms, own_rank, pct

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("chunks_count", "max_util_pct", "min_low_chunks_pct"),
    fields=("low_chunks", "chunks", "mean_util_pct", "worst_util_pct", "low_idle_ms"),
    aliases=("gpu_time_util",),
)
def low_gpu_utilization(views: Views, p: Params) -> Detection | None:
    """Nsight Systems' ``gpu_time_util``: split the window into ``chunks_count`` equal chunks and
    flag those under ``max_util_pct`` GPU time; fires when at least ``min_low_chunks_pct`` of the
    chunks are low (one slow chunk, e.g. warm-up, is not a finding)."""
    window = views.window
    acts = own_rank(views, views.gpu)
    if not window or acts.height == 0 or window[1] <= window[0]:
        return None
    chunks = int(p["chunks_count"])
    edges = np.linspace(window[0], window[1], chunks + 1).astype(np.int64)
    merged = intervals.merge(acts)
    busy = intervals.covered_between(merged, edges[:-1], edges[1:])
    width = np.maximum(edges[1:] - edges[:-1], 1)
    table = pl.DataFrame({
        "start_ns": edges[:-1], "end_ns": edges[1:],
        "util_pct": 100.0 * busy / width, "idle_ns": width - busy,
    })
    low = table.filter(pl.col("util_pct") < p["max_util_pct"])
    if pct(low.height, chunks) < p["min_low_chunks_pct"]:
        return None
    idle = int(low["idle_ns"].sum())
    evidence = low.sort("util_pct").select(
        "start_ns", "end_ns", "util_pct", (pl.col("idle_ns") / NS_PER_US).alias("idle_us")
    )
    return Detection(
        impact_ns=idle,
        fields={
            "low_chunks": low.height,
            "chunks": chunks,
            "mean_util_pct": float(100.0 * busy.sum() / width.sum()),
            "worst_util_pct": float(low["util_pct"].min()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "low_idle_ms": ms(idle),
        },
        evidence=evidence,
    )
