"""shared-memory-bank-conflicts: shared loads and stores replayed for bank conflicts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._kernels import evidence, fire, kernel_detection, needing

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("min_conflict_pct", "min_impact_pct"),
    fields=("kernel_count", "lost_ms", "top_kernel", "top_conflict_pct", "top_ways"),
)
def shared_memory_bank_conflicts(views: Views, p: Params) -> Detection | None:
    """Profiled kernels where bank conflicts are at least ``min_conflict_pct`` of the
    shared-memory wavefronts (loads and stores). The lost time is the L1's busy time spent on
    the extra wavefronts: duration x conflict share x L1 throughput %, at most the time above
    the roofline bound."""
    c = pl.col
    conflicts = c("shared_load_bank_conflicts").fill_null(0) + c(
        "shared_store_bank_conflicts"
    ).fill_null(0)
    waves = c("shared_load_wavefronts").fill_null(0) + c("shared_store_wavefronts").fill_null(0)
    requests = c("shared_load_requests").fill_null(0) + c("shared_store_requests").fill_null(0)
    found = (
        needing(
            views,
            ("shared_load_wavefronts", "shared_store_wavefronts"),
            "shared-memory wavefront counts",
        )
        .with_columns(
            conflict_pct=pl.when(waves > 0).then(100 * conflicts / waves),
            ways=pl.when(requests > 0).then(waves / requests),
        )
        .filter(c("conflict_pct") >= p["min_conflict_pct"])
        .with_columns(
            lost_ns=pl.min_horizontal(
                c("duration_ns")
                * c("conflict_pct")
                / 100
                * c("l1_throughput_pct").fill_null(100)
                / 100,
                c("duration_ns") - c("bound_ns"),
            ).clip(0)
        )
    )
    lost = fire(found, views, float(p["min_impact_pct"]))
    if lost is None:
        return None
    ev = evidence(
        found,
        "conflict_pct",
        "ways",
        c("shared_load_bank_conflicts"),
        c("shared_store_bank_conflicts"),
    )
    return kernel_detection(found, lost, ev, lambda top: {
        "top_conflict_pct": float(top["conflict_pct"]),
        "top_ways": float(top["ways"] or 0.0),
    })
