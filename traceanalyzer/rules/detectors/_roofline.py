"""The performance model's roofline per operator signature, shared by gemm-below-roofline and
memory-bound-below-bandwidth (docs/perf-model.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import NotApplicable, Params
from traceanalyzer.rules.detectors._common import pct, window_length

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


def op_roofline(views: Views) -> pl.DataFrame:
    """The roofline per (operator signature, precision) of the headline rank over the window
    (the cached view ``perf_roofline``), most time lost first; NotApplicable when there are no
    shapes or no peaks for the device."""
    table, why = views.perf_roofline
    if table is None:
        raise NotApplicable(why or "no roofline")
    return table


def slow_signatures(
    views: Views, p: Params, *predicates: pl.Expr, lost: str = "lost_ns"
) -> tuple[pl.DataFrame, int] | None:
    """The signatures matching ``predicates`` whose kernels average at least ``min_kernel_us``
    (shorter ones are bound by launch latency and the tail, not the kernel), most time lost
    first (column ``lost``), and the time they lose; None unless it is ``min_impact_pct`` of the
    window."""
    slow = (
        op_roofline(views)
        .filter(
            *predicates,
            pl.col("time_ns") >= p["min_kernel_us"] * 1e3 * pl.col("kernels"),
        )
        .sort([lost, "name", "input_dims"], descending=[True, False, False])
    )
    window = window_length(views)
    if slow.is_empty() or not window:
        return None
    lost_ns = int(slow[lost].sum())
    if pct(lost_ns, window) < p["min_impact_pct"]:
        return None
    return slow, lost_ns
