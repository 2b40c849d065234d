"""tail-effect: a last wave of blocks that leaves most SMs idle."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._kernels import evidence, fire, kernel_detection, needing

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("min_idle_pct", "min_impact_pct"),
    fields=("kernel_count", "lost_ms", "top_kernel", "top_waves", "top_blocks", "top_idle_pct"),
)
def tail_effect(views: Views, p: Params) -> Detection | None:
    """Profiled kernels of at least one full wave (blocks / (blocks a SM holds x SMs)) whose
    partial last wave leaves at least ``min_idle_pct`` of the SMs' time idle: with W waves
    rounded up to N, (N - W) / N of it, if the blocks take equal time. The lost time is that
    share of the duration (an upper bound: a lone block of the last wave may run faster than
    one sharing its SM)."""
    c = pl.col
    whole = c("waves").ceil()
    found = (
        needing(views, ("waves",), "occupancy limits to count waves")
        .filter(c("waves") >= 1)
        .with_columns(
            idle_pct=100 * (whole - c("waves")) / whole,
            blocks=c("grid_x").cast(pl.Int64) * c("grid_y") * c("grid_z"),
        )
        .filter(c("idle_pct") >= p["min_idle_pct"])
        .with_columns(lost_ns=c("duration_ns") * c("idle_pct") / 100)
    )
    lost = fire(found, views, float(p["min_impact_pct"]))
    if lost is None:
        return None
    ev = evidence(found, "waves", "blocks", "idle_pct", "sm_count")
    return kernel_detection(found, lost, ev, lambda top: {
        "top_waves": float(top["waves"]),
        "top_blocks": int(top["blocks"]),
        "top_idle_pct": float(top["idle_pct"]),
    })
