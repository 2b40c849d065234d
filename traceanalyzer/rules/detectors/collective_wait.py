"""collective-wait: collectives waiting for other ranks (imbalance between ranks)."""

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
    params=("min_wait_pct", "cpu_bound_host_wait_pct"),
    fields=("wait_ms", "wait_pct", "waiting_count", "collective_count", "top_wait_ms",
            "top_collective", "transfer_ms", "rank", "host_wait_pct", "pace"),
)
def collective_wait(views: Views, p: Params) -> Detection | None:
    """Time the collectives spent waiting for other ranks with no compute kernel beside them (the
    wait as analysis/comm.py estimates it); fires when it is at least ``min_wait_pct`` of the
    window."""
    comm = own_rank(views, views.collectives)
    waited = int(comm["exposed_wait_ns"].sum()) if comm.height else 0
    window = window_length(views)
    if not waited or not window or pct(waited, window) < p["min_wait_pct"]:
        return None
    comm = comm.with_columns(collective=collective_name(pl.col("name")))
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

_CPU_PACED = ("This rank's GPU also waited for its host {host_wait:.0f}% of its active span: its step "
              "is CPU-bound, and ranks paced by their CPUs drift apart with their hosts' timing "
              "(or a profiler's overhead), so the rank waited for may be late on its host rather "
              "than given more GPU work.")
