"""gpu-idle-gaps: GPU idle periods (no stream busy) by cause, stream and step. The gaps and
their causes come from ``Views.gpu_idle_gaps`` (the union of a rank's GPU activity,
classified as HTA does)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    attach_source,
    ms,
    own_rank,
    pct,
    window_length,
)
from traceanalyzer.rules.schema import duration_text

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


def _evidence_gaps(views: Views, gaps: pl.DataFrame) -> pl.DataFrame:
    """Gap rows as evidence, with the code that issued the work after the gap when recorded."""
    # The launches of the gaps' next work only (a few dozen), before the unique and the join:
    # a hash of every launch cost more than the rest of the rule (bench/NOTES.md, "nsys pages").
    wanted = gaps["next_correlation"].drop_nulls().unique().implode()
    launches = views.launches.select(
        "rank", pl.col("correlation").alias("next_correlation"), "call_stack",
        pl.col("launch_tid").alias("tid"),
        pl.col("launch_start_ns").fill_null(0).alias("_ls"),
        pl.col("launch_end_ns").fill_null(0).alias("_le"),
    ).filter(pl.col("next_correlation").is_in(wanted)).unique(
        ["rank", "next_correlation"], keep="first")
    out = gaps.join(launches, on=["rank", "next_correlation"], how="left") if gaps.height else gaps
    if out.height and "_ls" in out.columns:
        # the line of Python that issued the work the GPU waited for (with_stack=True traces)
        out = attach_source(out.head(20), views.cpu, start="_ls", end="_le")
    cols = [
        "start_ns", "end_ns", (pl.col("duration_ns") / NS_PER_US).alias("duration_us"), "cause",
        "step", "device", "stream", pl.col("prev_name").alias("prev_kernel"),
        pl.col("next_name").alias("next_kernel"), pl.col("next_op_name").alias("next_op"),
    ]
    cols += [c for c in ("source", "call_stack") if c in out.columns]
    return out.select(cols)


@detector(
    params=("min_gap_us", "min_idle_pct"),
    fields=("idle_ms", "idle_pct", "gap_count", "host_wait_pct", "kernel_wait_pct", "other_pct",
            "verdict", "worst_stream", "worst_step", "worst_step_idle_ms", "where"),
    aliases=("idle_gaps",),
)
def gpu_idle_gaps(views: Views, p: Params) -> Detection | None:
    """GPU idle periods (no stream busy) of at least ``min_gap_us``, when together they are at
    least ``min_idle_pct`` of the window; split by cause, stream and step."""
    window = window_length(views)
    gaps = own_rank(views, views.gpu_idle_gaps).filter(
        pl.col("duration_ns") >= p["min_gap_us"] * NS_PER_US
    )
    idle = int(gaps["duration_ns"].sum() or 0)
    if not window or gaps.height == 0 or pct(idle, window) < p["min_idle_pct"]:
        return None
    by_cause = dict(gaps.group_by("cause").agg(pl.col("duration_ns").sum()).iter_rows())
    host = pct(by_cause.get("host_wait", 0), idle)
    if host >= 50:
        verdict = "Host wait dominates: the GPU waits for the CPU to issue work (CPU-bound)."
    elif pct(by_cause.get("other", 0), idle) >= 50:
        # docs/metrics.md: "other" is a gap of 30 µs or more before work that was already
        # launched when the previous activity ended (queued behind a sync, an event, a copy).
        verdict = ("Most idle is in gaps of 30 µs or more before work that was already launched "
                   "(the GPU waited on a sync, an event or a dependency, not on the CPU).")
    else:
        verdict = "Most gaps are short waits between back-to-back kernels."
    # Per-stream view: the stream whose own long gaps add up to the most.
    stream_gaps = own_rank(views, views.idle_gaps).filter(
        pl.col("duration_ns") >= p["min_gap_us"] * NS_PER_US
    )
    worst_stream = None
    if stream_gaps.height:
        worst_stream = (
            stream_gaps.group_by("stream").agg(pl.col("duration_ns").sum())
            .sort(["duration_ns", "stream"], descending=[True, False])["stream"][0]
        )
    worst_step, worst_step_idle = None, 0
    stepped = gaps.filter(pl.col("step").is_not_null())
    if stepped.height:
        row = (
            stepped.group_by("step").agg(pl.col("duration_ns").sum())
            .sort(["duration_ns", "step"], descending=[True, False]).row(0)
        )
        worst_step, worst_step_idle = row[0], row[1]
    in_steps = int(stepped["duration_ns"].sum() or 0)
    if worst_step is None:
        where = "No steps found"
    elif 2 * in_steps < idle:  # most of the idle is in no step: say so, beside the worst step
        where = (f"{duration_text(idle - in_steps)} of it falls between or outside the steps; "
                 f"the most in one step: step {worst_step} ({duration_text(worst_step_idle)})")
    else:
        where = f"Most idle in step {worst_step} ({duration_text(worst_step_idle)})"
    where += f"; stream {worst_stream} has the most long gaps." if worst_stream is not None else "."
    evidence = _evidence_gaps(views, gaps.sort("duration_ns", descending=True).head(50))
    return Detection(
        impact_ns=idle,
        fields={
            "idle_ms": ms(idle),
            "idle_pct": pct(idle, window),
            "gap_count": gaps.height,
            "host_wait_pct": host,
            "kernel_wait_pct": pct(by_cause.get("kernel_wait", 0), idle),
            "other_pct": pct(by_cause.get("other", 0), idle),
            "verdict": verdict,
            "worst_stream": worst_stream,
            "worst_step": worst_step,
            "worst_step_idle_ms": ms(worst_step_idle),
            "where": where,
        },
        evidence=evidence,
    )
