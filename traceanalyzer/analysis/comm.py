"""Exposed communication as the nccl-not-overlapped rule and the job view count it.

One definition, shared so the two views cannot disagree: the collectives counted are a rank's
communication kernels, only those launched inside a step when that rank's trace marks steps (a
collective before the first step -- the process group's first barrier, DDP's parameter broadcast,
ranks lining up when a profiler starts -- is set-up that no overlap can hide), and not those
launched before the profiler started (no launch recorded, running before the rank's first
recorded launch: the previous step's tail, whose step is unknown). The share is of the rank's GPU
span.

A collective kernel starts when its rank reaches it and ends when every rank has: its duration is
the wait for the other ranks, then the transfer. Only the transfer is communication an overlap
can hide; the wait is the other ranks' lateness (a straggler, uneven work, a profiler slowing one
process), which the job view reports. The transfer of a collective is estimated as the shortest
duration of the same collective: the same kernel at the same place (its ordinal among the step's
kernels of that name) in the rank's other steps, and on the other ranks of a job. The wait is
taken from the start of the kernel, and a collective's exposed time is the part of its transfer,
``[end - transfer, end)``, not covered by compute kernels on the same GPU. Without steps or other
ranks there is nothing to compare with, and the whole duration counts (as HTA and TraceLens count
it). The estimate can only err towards less wait: a rank that waits in every step and on every
rank it is compared with keeps that wait as transfer. Matching by ordinal assumes the ranks run
the same collectives in the same order, as data-parallel ranks do; pipeline stages that send and
receive different numbers of messages would pair unrelated kernels (the job view's skew too).

The headline metric ``Metrics.exposed_communication_ns`` stays TraceLens's whole-trace union
(``analysis/metrics.py``): it is what the HTA/TraceLens parity checks compare.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analysis.intervals import overlap_ns

#: Per-rank columns of :func:`exposed_by_rank`.
RANK_SCHEMA = {"rank": pl.Int32, "exposed_comm_ns": pl.Int64, "exposed_comm_collectives": pl.Int64,
               "exposed_comm_window": pl.String, "comm_wait_ns": pl.Int64,
               "exposed_comm_basis": pl.String}


def step_collectives(launches: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The communication kernels that count, each with ``dur``, ``transfer_ns`` and ``wait_ns``
    (see the module doc), ``covered_ns`` (of the transfer, by compute kernels on the same rank
    and device), ``exposed_ns`` (the transfer's uncovered part) and ``exposed_wait_ns`` (the
    wait's: the time the GPU did nothing but wait for the other ranks).

    ``launches`` is the launches view (its ``step`` column: the step the kernel was launched in);
    ``steps`` any frame with a ``rank`` column naming the ranks whose trace marks steps. Pass
    every rank's launches: the other ranks' durations of the same collective bound its transfer.
    """
    is_comm = pl.col("category") == "communication"
    comm = flagged_comm_kernels(launches)
    cover = launches.select("kind", "category", "rank", "device", "start_ns", "end_ns").filter(
        pl.col("kind") == "kernel", ~is_comm).drop("kind", "category")
    stepped = steps["rank"].unique().to_list() if steps.height else []
    return collectives_from(comm, cover, stepped)


def flagged_comm_kernels(launches: pl.DataFrame) -> pl.DataFrame:
    """The communication kernels of ``launches`` (a launches view, or its kernels: every kernel
    of each rank), with ``in_trace``: :func:`launched_in_trace`, judged on all the kernels.
    That is judged on the columns it reads: the view's kernels with all their columns (names,
    stacks) were a copy of most of the view (bench/NOTES.md, "nsys pages")."""
    is_kernel, is_comm = pl.col("kind") == "kernel", pl.col("category") == "communication"
    flags = (launches.select("kind", "category", "rank", "launch_start_ns", "start_ns")
             .filter(is_kernel).select(in_trace=launched_in_trace(), comm=is_comm))
    return launches.filter(is_kernel, is_comm).with_columns(
        in_trace=flags.filter("comm")["in_trace"])


def collectives_from(comm: pl.DataFrame, cover: pl.DataFrame, stepped: list[int]) -> pl.DataFrame:
    """:func:`step_collectives` from its parts: ``comm`` (:func:`flagged_comm_kernels`, every
    rank's), ``cover`` (compute intervals by rank and device: the kernels themselves, or any part
    of their union that holds the communication kernels' windows) and the ranks that mark steps.
    A job's client runs this on the small frames its workers send (analysis.job_reduce)."""
    comm = comm.filter(pl.col("in_trace")).drop("in_trace")
    if stepped and "step" in comm.columns:
        comm = comm.filter(pl.col("step").is_not_null()
                           | ~pl.col("rank").is_in(pl.Series(stepped, dtype=pl.Int32).implode()))
    comm = _with_transfer(comm)
    transfers = comm.with_columns(start_ns=pl.col("end_ns") - pl.col("transfer_ns"))
    covered = overlap_ns(transfers, cover, name="covered_ns")["covered_ns"]
    waits = comm.with_columns(end_ns=pl.col("start_ns") + pl.col("wait_ns"))
    wait_covered = overlap_ns(waits, cover, name="covered_ns")["covered_ns"]
    return comm.with_columns(covered_ns=covered).with_columns(
        exposed_ns=pl.col("transfer_ns") - pl.col("covered_ns"),
        exposed_wait_ns=pl.col("wait_ns") - wait_covered,
    )


def launched_in_trace() -> pl.Expr:
    """False for a kernel launched before the profiler started: no launch recorded, and it runs
    before its rank's first recorded kernel launch (the previous step's tail, whose step is
    unknown). Evaluate it on the rank's kernels (the launches view filtered to kernels), before
    any other filter. Kernel launches only: a copy's launch can be recorded earlier on one rank
    than on another, and the ranks must judge the same collective alike."""
    first_launch = pl.col("launch_start_ns").min().over("rank")
    return (pl.col("launch_start_ns").is_not_null() | first_launch.is_null()
            | (pl.col("start_ns") >= first_launch))


def numbered(comm: pl.DataFrame) -> pl.DataFrame:
    """``ordinal``: each communication kernel's place among its rank's kernels of the same name in
    the same step, in start order. The i-th all-reduce of step 12 is the same collective on
    every rank, and in every step that runs the same collectives."""
    return comm.sort("rank", "start_ns", "stream").with_columns(
        ordinal=pl.int_range(pl.len()).over("rank", "step", "name")
    )


def _with_transfer(comm: pl.DataFrame) -> pl.DataFrame:
    """``dur``, ``transfer_ns`` (the shortest duration of the same collective in the rank's other
    steps and on other ranks) and ``wait_ns``; the same collective is the same kernel name at the
    same ordinal among the step's kernels of that name, as the job view matches them."""
    comm = numbered(comm).with_columns(dur=pl.col("end_ns") - pl.col("start_ns"))
    in_steps = pl.col("step").is_not_null()
    across_steps = pl.when(in_steps & (pl.len().over("rank", "name", "ordinal") > 1)).then(
        pl.col("dur").min().over("rank", "name", "ordinal"))
    across_ranks = pl.when(pl.col("rank").n_unique().over("step", "name", "ordinal") > 1).then(
        pl.col("dur").min().over("step", "name", "ordinal"))
    return (
        comm.with_columns(transfer_ns=pl.min_horizontal("dur", across_steps, across_ranks))
        .with_columns(wait_ns=pl.col("dur") - pl.col("transfer_ns"))
        .drop("ordinal")
    )


def exposed_by_rank(collectives: pl.DataFrame, steps: pl.DataFrame,
                    ranks: list[int]) -> pl.DataFrame:
    """Per rank: exposed_comm_ns, exposed_comm_collectives (how many were counted),
    exposed_comm_window (``steps`` when only the steps' collectives count, else ``trace``),
    exposed_comm_basis (what the wait was estimated from: ``ranks``, ``steps`` or ``none``) and
    comm_wait_ns (their wait for the other ranks with no compute beside it: rule
    collective-wait's figure), from :func:`step_collectives`' frame (``Views.collectives``)."""
    counted = (
        collectives.group_by("rank")
        .agg(exposed_comm_ns=pl.col("exposed_ns").sum(), exposed_comm_collectives=pl.len(),
             comm_wait_ns=pl.col("exposed_wait_ns").sum())
    )
    stepped = set(steps["rank"].unique().to_list()) if steps.height else set()
    # What the wait was estimated from: the other ranks of this analysis, else the rank's own
    # other steps, else nothing (whole durations count).
    basis = "ranks" if len(ranks) > 1 else "steps" if stepped else "none"
    base = pl.DataFrame({"rank": ranks,
                         "exposed_comm_window": ["steps" if r in stepped else "trace"
                                                 for r in ranks],
                         "exposed_comm_basis": [basis] * len(ranks)},
                        schema={"rank": pl.Int32, "exposed_comm_window": pl.String,
                                "exposed_comm_basis": pl.String})
    return (
        base.join(counted.cast({"rank": pl.Int32}), on="rank", how="left")
        .with_columns(pl.col("exposed_comm_ns", "exposed_comm_collectives", "comm_wait_ns")
                      .fill_null(0))
        .select(list(RANK_SCHEMA)).cast(RANK_SCHEMA).sort("rank")
    )

