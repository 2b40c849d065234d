"""low-occupancy: kernels with few warps resident, and what limits them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._kernels import evidence, fire, kernel_detection, needing

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: The limiter's name in messages.
LIMITERS = {
    "registers": "registers per thread",
    "shared_mem": "shared memory per block",
    "warps": "block size",
    "sm": "blocks per SM",
    "barriers": "barriers per block",
}


@detector(
    params=("max_occupancy_pct", "min_impact_pct"),
    fields=(
        "kernel_count",
        "lost_ms",
        "top_kernel",
        "top_achieved_pct",
        "top_theoretical_pct",
        "top_limiter",
        "top_registers",
    ),
)
def low_occupancy(views: Views, p: Params) -> Detection | None:
    """Profiled kernels whose achieved occupancy (active warps / the SM's maximum) is below
    ``max_occupancy_pct``; the limiter is the resource that caps the theoretical occupancy
    (registers, shared memory, block size, blocks per SM) or, where that is 100%, the
    imbalance that keeps warps from being resident. More warps can at best bring the busiest
    unit to its peak: the lost time is duration - max(duration x the busiest Speed-of-Light %,
    the time at the roofline bound)."""
    c = pl.col
    busiest = pl.max_horizontal("sm_throughput_pct", "memory_throughput_pct").fill_null(0)
    found = needing(views, ("achieved_occupancy_pct",), "occupancy figures").filter(
        c("achieved_occupancy_pct") < p["max_occupancy_pct"]
    )
    found = found.with_columns(
        limiter=pl.when(c("theoretical_occupancy_pct") < 100)
        .then(c("occupancy_limiter").replace_strict(LIMITERS, default=c("occupancy_limiter")))
        .otherwise(pl.lit("imbalance (theoretical occupancy is 100%)")),
        lost_ns=(
            c("duration_ns") - pl.max_horizontal(c("duration_ns") * busiest / 100, "bound_ns")
        ).clip(0),
    )
    lost = fire(found, views, float(p["min_impact_pct"]))
    if lost is None:
        return None
    ev = evidence(
        found,
        c("achieved_occupancy_pct"),
        c("theoretical_occupancy_pct"),
        "limiter",
        "registers",
        "shared_mem",
    )
    return kernel_detection(found, lost, ev, lambda top: {
        "top_achieved_pct": float(top["achieved_occupancy_pct"]),
        "top_theoretical_pct": float(top["theoretical_occupancy_pct"] or 0.0),
        "top_limiter": top["limiter"],
        "top_registers": int(top["registers"] or 0),
    })
