"""memory-bound-below-roofline: memory-bound kernels far below the DRAM bandwidth."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._kernels import evidence, fire, kernel_detection, needing

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("max_roofline_pct", "min_impact_pct"),
    fields=("kernel_count", "lost_ms", "top_kernel", "top_roofline_pct", "top_gbps", "peak_gbps"),
)
def memory_bound_below_roofline(views: Views, p: Params) -> Detection | None:
    """Profiled kernels left of the ridge point (their DRAM time exceeds their FLOP time) that
    moved their DRAM bytes at less than ``max_roofline_pct`` of the peak DRAM bandwidth. The
    lost time is the duration less the time at the roofline bound (the bytes at the peak)."""
    c = pl.col
    found = (
        needing(views, ("bound",), "FLOP and DRAM counts for a roofline")
        .filter((c("bound") == "memory") & (c("roofline_pct") < p["max_roofline_pct"]))
        .with_columns(lost_ns=(c("duration_ns") - c("bound_ns")).clip(0))
    )
    lost = fire(found, views, float(p["min_impact_pct"]))
    if lost is None:
        return None
    ev = evidence(
        found,
        (c("dram_bytes_per_s") / 1e9).alias("dram_gbps"),
        (c("dram_bytes") / 1e6).alias("dram_mb"),
        "l1_throughput_pct",
        "l2_throughput_pct",
    )
    return kernel_detection(found, lost, ev, lambda top: {
        "top_roofline_pct": float(top["roofline_pct"]),
        "top_gbps": (top["dram_bytes_per_s"] or 0) / 1e9,
        "peak_gbps": (top["dram_peak_bytes_per_s"] or 0) / 1e9,
    })
