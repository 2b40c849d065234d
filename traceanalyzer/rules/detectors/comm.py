"""Communication not hidden behind compute (HTA's overlap; TraceLens's exposed communication), and
collectives waiting for other ranks (imbalance between ranks)."""

from __future__ import annotations

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    ms,
    own_rank,
    pct,
    window_length,
)

_COLLECTIVE = r"(?i)(allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|alltoall|all_to_all|broadcast|sendrecv|send|recv|reduce)"


@detector(
    "nccl_exposed",
    params=("min_exposed_pct",),
    fields=("exposed_ms", "exposed_pct", "comm_ms", "overlap_pct", "collective_count",
            "top_collective", "top_collective_exposed_ms", "wait_ms", "idle_wait_ms", "rank"),
)
def nccl_exposed(views, p: Params) -> Detection | None:
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
    comm = comm.with_columns(collective=_collective_name(pl.col("name")))
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


@detector(
    "collective_wait",
    params=("min_wait_pct", "cpu_bound_host_wait_pct"),
    fields=("wait_ms", "wait_pct", "waiting_count", "collective_count", "top_wait_ms",
            "top_collective", "transfer_ms", "rank", "host_wait_pct", "pace"),
)
def collective_wait(views, p: Params) -> Detection | None:
    """Time the collectives spent waiting for other ranks with no compute kernel beside them (the
    wait as analysis/comm.py estimates it); fires when it is at least ``min_wait_pct`` of the
    window."""
    comm = own_rank(views, views.collectives)
    waited = int(comm["exposed_wait_ns"].sum()) if comm.height else 0
    window = window_length(views)
    if not waited or not window or pct(waited, window) < p["min_wait_pct"]:
        return None
    comm = comm.with_columns(collective=_collective_name(pl.col("name")))
    waiting = comm.filter(pl.col("exposed_wait_ns") > 0).sort(
        ["exposed_wait_ns", "start_ns"], descending=[True, False])
    evidence = waiting.select(
        "start_ns", "end_ns", "name", "collective", "stream", "rank", "step",
        (pl.col("dur") / NS_PER_US).alias("duration_us"),
        (pl.col("wait_ns") / NS_PER_US).alias("wait_us"),
        (pl.col("exposed_wait_ns") / NS_PER_US).alias("exposed_wait_us"),
        (pl.col("transfer_ns") / NS_PER_US).alias("transfer_us"),
    )
    # A rank whose GPU often waits for its own host is paced by its CPU, and so, most likely, are
    # the others: their steps then end when their hosts get through them, and the ranks drift
    # apart with the hosts' timing (and a profiler's overhead on each), whatever their GPU work.
    host_wait = views.metrics.host_wait_pct
    pace = _CPU_PACED.format(host_wait=host_wait) if host_wait >= p["cpu_bound_host_wait_pct"] else ""
    return Detection(
        impact_ns=waited,
        fields={
            "wait_ms": ms(waited),
            "wait_pct": pct(waited, window),
            "waiting_count": waiting.height,
            "collective_count": comm.height,
            "top_wait_ms": ms(int(waiting["exposed_wait_ns"][0])),
            "top_collective": waiting["collective"][0],
            "transfer_ms": ms(int(waiting["transfer_ns"].sum())),
            "rank": views.metrics.rank,
            "host_wait_pct": host_wait,
            "pace": pace,
        },
        evidence=evidence,
    )


_CPU_PACED = ("This rank's GPU also waited for its host {host_wait:.0f}% of the window: its step "
              "is CPU-bound, and ranks paced by their CPUs drift apart with their hosts' timing "
              "(or a profiler's overhead), so the rank waited for may be late on its host rather "
              "than given more GPU work.")


def _collective_name(name: pl.Expr) -> pl.Expr:
    """allreduce, allgather, sendrecv, ... from a communication kernel's name; "other" if none."""
    return (name.str.extract(_COLLECTIVE, 1).str.to_lowercase().str.replace_all("_", "")
            .fill_null("other"))
