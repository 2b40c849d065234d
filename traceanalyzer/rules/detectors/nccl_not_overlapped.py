"""nccl-not-overlapped: communication not hidden behind compute (HTA's overlap; TraceLens's
exposed communication)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    collective_name,
    ms,
    own_rank,
    pct,
    window_length,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("min_exposed_pct",),
    fields=("exposed_ms", "exposed_pct", "comm_ms", "overlap_pct", "collective_count",
            "top_collective", "top_collective_exposed_ms", "wait_ms", "idle_wait_ms", "rank"),
    aliases=("nccl_exposed",),
)
def nccl_not_overlapped(views: Views, p: Params) -> Detection | None:
    """Communication kernels' transfers not covered by compute kernels on the same device (only
    those of the steps, when the trace marks steps; the wait for other ranks left out, see
    analysis/comm.py); fires when the exposed time is at least ``min_exposed_pct`` of the
    window."""
    # One definition with the job view (analysis/comm.py): only the steps' collectives count when
    # the trace marks steps; a set-up collective before the first step cannot be overlapped. All
    # ranks go in: another rank's duration of the same collective bounds its transfer time.
    comm = own_rank(views, views.collectives)
    if comm.height == 0:
        return None
    comm = comm.with_columns(collective=collective_name(pl.col("name")))
    exposed = int(comm["exposed_ns"].sum())
    window = window_length(views)
    if not window or pct(exposed, window) < p["min_exposed_pct"]:
        return None
    total = int(comm["transfer_ns"].sum())
    by_coll = comm.group_by("collective").agg(
        pl.col("exposed_ns").sum(), n=pl.len()
    ).sort(["exposed_ns", "collective"], descending=[True, False])
    evidence = comm.sort("exposed_ns", descending=True).select(
        "start_ns", "end_ns", "name", "collective", "stream", "rank", "step",
        (pl.col("dur") / NS_PER_US).alias("duration_us"),
        (pl.col("wait_ns") / NS_PER_US).alias("wait_us"),
        (pl.col("exposed_ns") / NS_PER_US).alias("exposed_us"),
        pl.col("op_name").alias("op"),
    )
    return Detection(
        impact_ns=exposed,
        fields={
            "exposed_ms": ms(exposed),
            "exposed_pct": pct(exposed, window),
            "comm_ms": ms(total),
            "overlap_pct": pct(total - exposed, total),
            "collective_count": comm.height,
            "top_collective": by_coll["collective"][0],
            "top_collective_exposed_ms": ms(by_coll["exposed_ns"][0]),
            "wait_ms": ms(int(comm["wait_ns"].sum())),
            "idle_wait_ms": ms(int(comm["exposed_wait_ns"].sum())),
            "rank": views.metrics.rank,
        },
        evidence=evidence,
    )
