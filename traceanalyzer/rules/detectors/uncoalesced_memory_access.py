"""uncoalesced-memory-access: global loads and stores that use little of each sector fetched."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._kernels import evidence, fire, kernel_detection, needing

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("max_efficiency_pct", "min_impact_pct"),
    fields=(
        "kernel_count",
        "lost_ms",
        "top_kernel",
        "top_efficiency_pct",
        "top_sectors_per_request",
    ),
)
def uncoalesced_memory_access(views: Views, p: Params) -> Detection | None:
    """Profiled kernels whose global loads and stores used less than ``max_efficiency_pct`` of
    the bytes of the 32-byte sectors they fetched (Nsight Compute's bytes per sector / 32, over
    loads and stores weighted by their sectors). The lost time is what fetching only the bytes
    used would save: duration x (1 - efficiency), at most the time above the roofline bound."""
    c = pl.col
    ld, st = c("global_load_sectors").fill_null(0), c("global_store_sectors").fill_null(0)
    used = ld * c("global_load_efficiency_pct").fill_null(100) + st * c(
        "global_store_efficiency_pct"
    ).fill_null(100)
    k = needing(
        views, ("global_load_sectors", "global_store_sectors"), "global sector counts"
    ).with_columns(efficiency_pct=pl.when(ld + st > 0).then(used / (ld + st)))
    found = k.filter(c("efficiency_pct") < p["max_efficiency_pct"]).with_columns(
        lost_ns=pl.min_horizontal(
            c("duration_ns") * (1 - c("efficiency_pct") / 100), c("duration_ns") - c("bound_ns")
        )
    )
    lost = fire(found, views, float(p["min_impact_pct"]))
    if lost is None:
        return None
    ev = evidence(
        found,
        "efficiency_pct",
        c("global_load_sectors_per_request").alias("load_sectors_per_request"),
        c("global_store_sectors_per_request").alias("store_sectors_per_request"),
    )
    return kernel_detection(found, lost, ev, lambda top: {
        "top_efficiency_pct": float(top["efficiency_pct"]),
        "top_sectors_per_request": float(top["global_load_sectors_per_request"] or 0.0),
    })
