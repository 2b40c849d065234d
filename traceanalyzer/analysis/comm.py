"""Exposed communication as the nccl-not-overlapped rule and the job view count it.

One definition, shared so the two views cannot disagree: the collectives counted are a rank's
communication kernels, only those launched inside a step when that rank's trace marks steps (a
collective before the first step -- the process group's first barrier, DDP's parameter broadcast,
ranks lining up when a profiler starts -- is set-up that no overlap can hide); each one's exposed
time is its duration minus the part covered by compute kernels on the same GPU. The share is of
the rank's GPU span.

The headline metric ``Metrics.exposed_communication_ns`` stays TraceLens's whole-trace union
(``analysis/metrics.py``): it is what the HTA/TraceLens parity checks compare.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analysis.intervals import overlap_ns

#: Per-rank columns of :func:`exposed_by_rank`.
RANK_SCHEMA = {"rank": pl.Int32, "exposed_comm_ns": pl.Int64, "exposed_comm_collectives": pl.Int64,
               "exposed_comm_window": pl.String}


def step_collectives(launches: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The communication kernels that count, each with ``dur``, ``covered_ns`` (by compute kernels
    on the same rank and device) and ``exposed_ns``.

    ``launches`` is the launches view (its ``step`` column: the step the kernel was launched in);
    ``steps`` any frame with a ``rank`` column naming the ranks whose trace marks steps.
    """
    kernels = launches.filter(pl.col("kind") == "kernel")
    is_comm = pl.col("category") == "communication"
    comm = kernels.filter(is_comm)
    if steps.height and "step" in comm.columns:
        stepped = steps["rank"].unique().implode()
        comm = comm.filter(pl.col("step").is_not_null() | ~pl.col("rank").is_in(stepped))
    cover = kernels.filter(~is_comm).select("rank", "device", "start_ns", "end_ns")
    return overlap_ns(comm, cover, name="covered_ns").with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns")
    ).with_columns(exposed_ns=pl.col("dur") - pl.col("covered_ns"))


def exposed_by_rank(launches: pl.DataFrame, steps: pl.DataFrame,
                    ranks: list[int]) -> pl.DataFrame:
    """Per rank: exposed_comm_ns, exposed_comm_collectives (how many were counted) and
    exposed_comm_window (``steps`` when only the steps' collectives count, else ``trace``)."""
    counted = (
        step_collectives(launches, steps).group_by("rank")
        .agg(exposed_comm_ns=pl.col("exposed_ns").sum(), exposed_comm_collectives=pl.len())
    )
    stepped = set(steps["rank"].unique().to_list()) if steps.height else set()
    base = pl.DataFrame({"rank": ranks,
                         "exposed_comm_window": ["steps" if r in stepped else "trace"
                                                 for r in ranks]},
                        schema={"rank": pl.Int32, "exposed_comm_window": pl.String})
    return (
        base.join(counted.cast({"rank": pl.Int32}), on="rank", how="left")
        .with_columns(pl.col("exposed_comm_ns", "exposed_comm_collectives").fill_null(0))
        .select(list(RANK_SCHEMA)).cast(RANK_SCHEMA).sort("rank")
    )

