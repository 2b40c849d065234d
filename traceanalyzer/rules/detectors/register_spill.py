"""register-spill: kernels whose registers spill to local memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._kernels import evidence, fire, kernel_detection, needing

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("min_spill_pct", "min_impact_pct"),
    fields=(
        "kernel_count",
        "lost_ms",
        "top_kernel",
        "top_spill_pct",
        "top_local_mb",
        "top_registers",
    ),
)
def register_spill(views: Views, p: Params) -> Detection | None:
    """Profiled kernels whose local-memory (spill) requests are at least ``min_spill_pct`` of
    their L1 requests (Nsight Compute's spilling request overhead; where the page lacks it, the
    local sectors' share of local + global sectors). The lost time is that share of the
    duration (the L1 traffic the spills add), at most the time above the roofline bound."""
    c = pl.col
    local = c("local_load_sectors").fill_null(0) + c("local_store_sectors").fill_null(0)
    glob = c("global_load_sectors").fill_null(0) + c("global_store_sectors").fill_null(0)
    share = pl.coalesce(
        pl.when(c("spill_requests_pct") > 0).then(c("spill_requests_pct")),
        pl.when(local > 0).then(100 * local / (local + glob)),
    )
    found = (
        needing(views, ("local_load_sectors", "spill_requests_pct"), "local-memory counts")
        .with_columns(spill_pct=share)
        .filter(c("spill_pct") >= p["min_spill_pct"])
        .with_columns(
            lost_ns=pl.min_horizontal(
                c("duration_ns") * c("spill_pct") / 100, c("duration_ns") - c("bound_ns")
            ).clip(0)
        )
    )
    lost = fire(found, views, float(p["min_impact_pct"]))
    if lost is None:
        return None
    ev = evidence(found, "spill_pct", (c("local_bytes") / 1e6).alias("local_mb"), "registers")
    return kernel_detection(found, lost, ev, lambda top: {
        "top_spill_pct": float(top["spill_pct"]),
        "top_local_mb": (top["local_bytes"] or 0) / 1e6,
        "top_registers": int(top["registers"] or 0),
    })
