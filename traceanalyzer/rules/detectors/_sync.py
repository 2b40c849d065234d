"""Host waits on the device, shared by hidden-sync, sync-memcpy and pageable-memcpy: what a
blocking call's wait cost in lost overlap of CPU and GPU work."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.model import COLLECT_ENGINE

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: The version suffix API names carry in Nsight Systems exports (cudaStreamSynchronize_v3020).
API_VERSION = r"(_v\d+)?$"
#: Calls kept as evidence, each looked up for the line of Python that made it.
EVIDENCE_SOURCES = 20


def _rank_gaps(work: pl.DataFrame) -> pl.DataFrame:
    """The gaps in the union of each rank's ``work`` (rank, ``_gs``, ``_ge``, sorted by start):
    the rank-level idle gaps of :func:`analysis.idle.idle_gaps`, from the three columns they
    need (that function also names and places each gap, and sorts every column it reads)."""
    return (
        work.lazy()
        .select("rank", "start_ns", "end_ns")
        .sort("rank", "start_ns")
        .with_columns(_prev=pl.col("end_ns").cum_max().shift(1).over("rank"))
        .filter(pl.col("_prev").is_not_null(), pl.col("start_ns") > pl.col("_prev"))
        .select("rank", _gs="_prev", _ge="start_ns")
        .sort("_gs")
        .collect(engine=COLLECT_ENGINE)
    )


def overlap_lost(views: Views, calls: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """Add ``waited_ns``, ``gpu_idle_after_ns``, ``lost_ns`` and ``_gap`` to blocking calls
    (``rank``, ``wait_from`` (when the host began to wait), ``end_ns`` (when it returned)).

    A blocking call makes the host wait until the GPU has drained its queue (``waited``: the
    GPU's busy time from ``wait_from`` to the start of the GPU's idle gap), and the GPU then
    idles until the host has done its next work and launched more (``idle after``: from the
    call's return to the gap's end). Without the wait the host would have done that work while
    the GPU drained its queue, so the time lost is the smaller of the two: a wait before a long
    CPU stretch costs only what the GPU still had queued, and one after which the host launches
    at once costs only the relaunch. In a steady loop, that is the step time the fix saves.

    ``work`` is the GPU activity the host can have waited for: without the copies that belong
    to the waits themselves (the read a sync waits for, the pageable copy a call blocks on).
    Calls whose return falls in one gap are one wait, charged once.
    """
    gaps = _rank_gaps(work)
    if calls.height == 0 or gaps.height == 0:
        return calls.with_columns(
            waited_ns=pl.lit(0, pl.Int64), gpu_idle_after_ns=pl.lit(0, pl.Int64),
            lost_ns=pl.lit(0, pl.Int64), _gap=pl.lit(None, pl.Int64),
        )
    inside = pl.col("_ge").is_not_null() & (pl.col("_ge") > pl.col("end_ns"))
    calls = (
        calls.with_row_index("_row")
        .sort("end_ns")
        .join_asof(gaps, left_on="end_ns", right_on="_gs", by="rank", strategy="backward",
                   check_sortedness=False)
        .with_columns(
            gpu_idle_after_ns=pl.when(inside).then(pl.col("_ge") - pl.col("end_ns")).otherwise(0),
            _gap=pl.when(inside).then(pl.col("_gs")),
        )
        .sort("_row")
    )
    # Busy time, not the span: a call can also wait for other things (a first call for CUDA to
    # start, a staged copy for the driver).
    waits = calls.select(
        "rank",
        start_ns=pl.when(inside).then("wait_from").otherwise(0),
        end_ns=pl.when(inside).then(pl.max_horizontal("_gs", "wait_from")).otherwise(0),
    )
    waited = intervals.overlap_ns(waits, work.select("rank", "start_ns", "end_ns"), name="w")
    calls = calls.with_columns(waited_ns=waited["w"]).drop("_row", "_gs", "_ge")
    per_gap = calls.group_by("_gap").agg(
        lost_ns=pl.min_horizontal(pl.col("waited_ns").max(), pl.col("gpu_idle_after_ns").max())
    )
    # The wait is charged to the gap's first call (the one that waited longest), once.
    first = pl.col("waited_ns").rank("ordinal", descending=True).over("_gap") == 1
    return calls.join(per_gap, on="_gap", how="left", nulls_equal=True).with_columns(
        lost_ns=pl.when(pl.col("_gap").is_not_null() & first).then("lost_ns").otherwise(0)
    )


def wait_totals(calls: pl.DataFrame) -> tuple[int, int]:
    """The GPU work waited for and the GPU idle after, over ``overlap_lost``'s waits: each gap's
    longest, counted once."""
    per_gap = calls.filter(pl.col("_gap").is_not_null()).group_by("_gap").agg(
        pl.col("waited_ns").max(), pl.col("gpu_idle_after_ns").max()
    )
    return int(per_gap["waited_ns"].sum() or 0), int(per_gap["gpu_idle_after_ns"].sum() or 0)
