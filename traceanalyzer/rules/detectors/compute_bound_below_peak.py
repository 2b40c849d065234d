"""compute-bound-below-peak: compute-bound kernels far below their FLOP pipe's peak."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._kernels import evidence, fire, kernel_detection, needing

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("max_roofline_pct", "min_impact_pct"),
    fields=(
        "kernel_count",
        "lost_ms",
        "top_kernel",
        "top_roofline_pct",
        "top_tflops",
        "top_sm_pct",
    ),
)
def compute_bound_below_peak(views: Views, p: Params) -> Detection | None:
    """Profiled kernels right of the ridge point whose busiest FLOP pipe (FP32, FP64, FP16,
    tensor) ran below ``max_roofline_pct`` of its peak, with no SM pipe near its roof. The lost
    time is the duration less the time at the roofline bound (the FLOPs at the pipe's peak)."""
    c = pl.col
    found = (
        needing(views, ("bound",), "FLOP and DRAM counts for a roofline")
        .filter((c("bound") == "compute") & (c("roofline_pct") < p["max_roofline_pct"]))
        .with_columns(lost_ns=(c("duration_ns") - c("bound_ns")).clip(0))
    )
    lost = fire(found, views, float(p["min_impact_pct"]))
    if lost is None:
        return None
    ev = evidence(
        found,
        (c("flop_per_s") / 1e12).alias("tflops"),
        "fp32_pipe_pct",
        "tensor_pipe_pct",
        "sm_throughput_pct",
        "achieved_occupancy_pct",
    )
    return kernel_detection(found, lost, ev, lambda top: {
        "top_roofline_pct": float(top["roofline_pct"]),
        "top_tflops": (top["flop_per_s"] or 0) / 1e12,
        "top_sm_pct": float(top["sm_throughput_pct"] or 0.0),
    })
