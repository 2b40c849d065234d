"""Communication not hidden behind compute (HTA's overlap; TraceLens's exposed communication)."""

from __future__ import annotations

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    ms,
    overlap_ns,
    own_rank,
    pct,
    window_length,
)

_COLLECTIVE = r"(?i)(allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|alltoall|all_to_all|broadcast|sendrecv|send|recv|reduce)"


@detector(
    "nccl_exposed",
    params=("min_exposed_pct",),
    fields=("exposed_ms", "exposed_pct", "comm_ms", "overlap_pct", "collective_count",
            "top_collective", "top_collective_exposed_ms", "rank"),
)
def nccl_exposed(views, p: Params) -> Detection | None:
    """Communication kernels not covered by compute kernels on the same device (only those of
    the steps, when the trace marks steps); fires when the exposed time is at least
    ``min_exposed_pct`` of the window."""
    launches = own_rank(views, views.launches)
    comm = launches.filter(pl.col("kind") == "kernel", pl.col("category") == "communication")
    if views.steps.height and "step" in comm.columns:
        # The steps' communication: a collective before the first step (the process group's
        # first barrier, DDP's parameter broadcast, ranks lining up when a profiler starts)
        # is set-up that no overlap can hide, and it would otherwise count as exposed.
        comm = comm.filter(pl.col("step").is_not_null())
    if comm.height == 0:
        return None
    compute = launches.filter(pl.col("kind") == "kernel", pl.col("category") != "communication")
    comm = overlap_ns(comm, compute.select("rank", "device", "start_ns", "end_ns"),
                      name="covered_ns").with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns"),
        collective=pl.col("name").str.extract(_COLLECTIVE, 1).str.to_lowercase()
        .str.replace_all("_", "").fill_null("other"),
    ).with_columns(exposed_ns=pl.col("dur") - pl.col("covered_ns"))
    exposed = int(comm["exposed_ns"].sum())
    window = window_length(views)
    if not window or pct(exposed, window) < p["min_exposed_pct"]:
        return None
    total = int(comm["dur"].sum())
    by_coll = comm.group_by("collective").agg(
        pl.col("exposed_ns").sum(), n=pl.len()
    ).sort(["exposed_ns", "collective"], descending=[True, False])
    evidence = comm.sort("exposed_ns", descending=True).select(
        "start_ns", "end_ns", "name", "collective", "stream", "rank", "step",
        (pl.col("dur") / NS_PER_US).alias("duration_us"),
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
            "rank": views.metrics.rank,
        },
        evidence=evidence,
    )
