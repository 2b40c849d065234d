"""allocator-churn: device memory allocated and freed through the driver inside the steps
(``cudaMalloc``/``cudaFree`` every step), charged with the GPU idle those calls cause."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.ingest.memory import ALLOCATION_APIS
from traceanalyzer.model import API_KINDS
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    enclosing_op,
    in_steps,
    ms,
    own_rank,
    pct,
    records_operators,
    window_length,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: Calls kept as evidence.
EVIDENCE_CALLS = 20
#: The calls that free device memory: cudaFree synchronizes the device before it returns.
FREE_APIS = ("cudaFree", "cuMemFree", "cuMemFree_v2", "hipFree")


@detector(
    params=("min_per_step_count", "min_impact_pct"),
    fields=(
        "call_count",
        "per_step",
        "malloc_count",
        "free_count",
        "call_ms",
        "idle_ms",
        "lost_ms",
        "lost_per_step_ms",
        "step_ms",
        "predicted_step_ms",
        "top_op",
        "under_op",
    ),
)
def allocator_churn(views: Views, p: Params) -> Detection | None:
    """The runtime's device allocation calls (ALLOCATION_APIS) inside steps that also free
    device memory (a growing cache frees nothing; churn does); impact = the
    GPU idle from each call's start until the GPU's next work after it returns (the call
    itself, the queue a cudaFree drains, the relaunch after it), over the union of those
    stretches, so overlapping calls count once."""
    cpu = own_rank(views, views.cpu)
    calls = cpu.filter(pl.col("kind").is_in(API_KINDS), pl.col("name").is_in(ALLOCATION_APIS))
    if calls.is_empty() or not calls["name"].is_in(FREE_APIS).any():
        return None
    if views.steps.is_empty():
        # Frees at start-up (a model loaded, then moved) are not a loop's churn.
        raise NotApplicable(
            "the trace marks no steps, so frees in the loop cannot be told from start-up"
        )
    calls = in_steps(calls, views.steps)
    steps = views.steps.height
    # A caching allocator that only grows (cudaMalloc in the first steps) frees nothing: the
    # frees are what churn is.
    frees = calls.filter(pl.col("name").is_in(FREE_APIS)).height
    if frees == 0 or frees / steps < p["min_per_step_count"]:
        return None
    window = window_length(views)
    if not window:
        return None
    gaps = (
        own_rank(views, views.gpu_idle_gaps).select("rank", "start_ns", "end_ns").sort("start_ns")
    )
    # Each call's stretch runs on to the end of the GPU idle gap its return falls in.
    stretch = (
        calls.sort("end_ns")
        .join_asof(
            gaps.select("rank", _gs="start_ns", _ge="end_ns"),
            left_on="end_ns",
            right_on="_gs",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .with_columns(
            _until=pl.when(pl.col("_ge") > pl.col("end_ns")).then("_ge").otherwise("end_ns")
        )
    )
    spans = stretch.select("rank", "start_ns", end_ns="_until")
    merged = intervals.merge(spans, by=["rank"])
    idle = intervals.intersection_length(
        merged.select("start_ns", "end_ns"), gaps.select("start_ns", "end_ns")
    )
    if pct(idle, window) < p["min_impact_pct"]:
        return None
    per_call = intervals.overlap_ns(
        stretch.select(
            "rank", "start_ns", "end_ns", "name", "tid", "step", _until="_until"
        ).with_columns(end_ns="_until"),
        gaps,
        name="idle_ns",
    )
    named = enclosing_op(calls.filter(~pl.col("name").is_in(FREE_APIS)), cpu)
    ops = (
        named.group_by(pl.col("op").fill_null("(no operator recorded)"))
        .len()
        .sort(["len", "op"], descending=[True, False])
    )
    call_ns = int((calls["end_ns"] - calls["start_ns"]).sum() or 0)
    step_ns = views.steps.select((pl.col("wall_end_ns") - pl.col("wall_start_ns")).median()).item()
    lost_per_step = idle / steps
    evidence = (
        per_call.sort("idle_ns", descending=True)
        .head(EVIDENCE_CALLS)
        .select(
            "start_ns",
            "end_ns",
            pl.col("name").alias("api"),
            "step",
            "tid",
            ((pl.col("end_ns") - pl.col("start_ns")) / NS_PER_US).alias("stretch_us"),
            (pl.col("idle_ns") / NS_PER_US).alias("gpu_idle_us"),
        )
    )
    return Detection(
        impact_ns=idle,
        fields={
            "call_count": calls.height,
            "per_step": calls.height / steps,
            "malloc_count": calls.height - frees,
            "free_count": frees,
            "call_ms": ms(call_ns),
            "idle_ms": ms(idle),
            "lost_ms": ms(idle),
            "lost_per_step_ms": ms(lost_per_step),
            "step_ms": ms(step_ns),
            "predicted_step_ms": ms(step_ns - lost_per_step),
            "top_op": ops["op"][0] if ops.height else None,
            # Named only where the trace records operators (an Nsight Systems trace has none).
            "under_op": (f", mostly under {ops['op'][0]}"
                         if ops.height and records_operators(views) else ""),
        },
        evidence=evidence,
    )
