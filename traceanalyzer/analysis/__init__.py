"""Analyses: from canonical frames to metrics, summaries and findings.

:func:`analyze_trace` is the one entry point the CLI, batch mode and notebooks use.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceanalyzer.analysis import intervals, memory
from traceanalyzer.analysis.idle import IDLE_CAUSES, idle_by_cause
from traceanalyzer.analysis.kernels import category_summary, kernel_summary
from traceanalyzer.analysis.memory_check import check_analysis_memory
from traceanalyzer.analysis.result import AnalysisResult, Metrics
from traceanalyzer.analysis.timings import step
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import MIN_STEPS_FOR_OUTLIERS, OUTLIER_FACTOR
from traceanalyzer.model import Trace

#: Buckets of the utilization-over-time chart.
UTILIZATION_BUCKETS = 100


def analyze_trace(trace: Trace, *, rule_config: Any = None, rules: bool = True) -> AnalysisResult:
    """Compute metrics, summaries and (unless ``rules`` is False) rule findings for ``trace``."""
    with step("memory check", "summary"):
        check_analysis_memory(trace)
    views = Views(trace)
    metrics = views.metrics
    window = trace.meta.extra.get("window")
    kind = window.get("kind", "all") if isinstance(window, dict) else "all"
    for by_rank in views.metrics_by_rank.values():
        by_rank.window_kind = kind
    rank = pl.col("rank") == metrics.rank
    with step("steps", "summary"):
        steps = step_breakdown(views)
    with step("kernels", "summary"):
        kernels = kernel_summary(views.gpu.filter(rank))
    with step("categories", "summary"):
        categories = category_summary(views.gpu.filter(rank))
    with step("operators", "summary"):
        operators = operator_summary(views.launches.filter(rank))
    with step("utilization", "summary"):
        busy = utilization(views.launches.filter(rank), metrics)
    with step("streams", "summary"):
        streams = stream_summary(views)
    result = AnalysisResult(
        meta=trace.meta,
        metrics=metrics,
        steps=steps,
        kernels=kernels,
        categories=categories,
        operators=operators,
        utilization=busy,
        streams=streams,
        ranks=rank_table(views.metrics_by_rank) if len(views.ranks) > 1 else None,
    )
    _add_memory(result, views)
    result.perf, result.perf_summary = views.perf_model
    if rules:
        from traceanalyzer.rules.engine import MAX_JUDGED_RANKS, evaluate, gpu_ranks

        result.findings, result.rule_outcomes = evaluate(views, rule_config)
        if (ranks := len(gpu_ranks(views))) > MAX_JUDGED_RANKS:
            from dataclasses import replace

            result.meta = replace(result.meta, warnings=[
                *result.meta.warnings,
                f"the rules judged {MAX_JUDGED_RANKS} of the file's {ranks:,} ranks with GPU "
                "work: the headline and those with the most GPU busy time"])
    with step("critical path", "summary"):
        _add_critical_path(result, views)
    _add_kernel_verdicts(result, views)
    return result


def _add_kernel_verdicts(result: AnalysisResult, views: Views) -> None:
    """Nsight Compute's launches judged (analysis.ncu), where the trace carries them; the rows
    themselves leave the result's metadata (the table holds what the reports show)."""
    from dataclasses import replace

    from traceanalyzer.analysis.ncu import kernel_table

    extra = result.meta.extra
    if "kernel_metrics" not in extra and "ncu_rules" not in extra:
        return
    verdicts = views.kernel_verdicts
    if not verdicts.is_empty():
        rules = extra.get("ncu_rules")
        result.kernel_verdicts = kernel_table(verdicts, result.findings,
                                              rules if isinstance(rules, list) else None)
    result.meta = replace(result.meta, extra={k: v for k, v in extra.items()
                                              if k not in ("kernel_metrics", "ncu_rules")})


def _add_critical_path(result: AnalysisResult, views: Views) -> None:
    """The headline rank's critical path per step, and each finding's what-if
    (docs/critical-path.md)."""
    from traceanalyzer.analysis import critical_path, whatif
    from traceanalyzer.analysis.path_ranks import every_rank

    headline = result.metrics.rank
    found = critical_path.analyze(views, headline)
    if found is not None:
        result.critical_path = found.steps
        result.critical_segments = found.segments
    # Every rank's path (the headline's reused), each GPU's share of it (path_ranks.py), and
    # the what-if of each rank's findings on that rank's own graph (whatif.py).
    summaries: dict[int, dict[str, Any]] = {}

    def predict(rank: int, path: critical_path.CriticalPath) -> None:
        if rank == headline or whatif.has_findings(result.findings, rank, headline):
            summary = whatif.predict(views, path.graph, result.findings, headline, path.replay)
            # Which steps the path and the what-if judged (all, unless over the budget).
            summaries[rank] = {**summary, "judged_steps": path.graph.judged}

    result.critical_path_ranks, result.critical_path_gpus = every_rank(
        views, headline, found, on_path=predict
    )
    if headline in summaries:
        result.what_if = dict(summaries[headline])
        if len(summaries) > 1:  # "all of the above" of every rank with findings
            result.what_if["ranks"] = [summaries[r] for r in sorted(summaries)]


def _add_memory(result: AnalysisResult, views: Views) -> None:
    """The device memory figures (analysis.memory), where the trace records memory events."""
    if views.memory.is_empty():
        return
    summary = memory.memory_summary(views.memory, views.wall_steps, views.meta)
    top = memory.headline(summary, result.metrics.rank)
    result.memory = summary
    result.memory_holders = memory.holders_at_peak(views.memory, summary)
    if top is not None:
        result.metrics.peak_memory_allocated_bytes = top["peak_allocated_bytes"]
        result.metrics.peak_memory_reserved_bytes = top["peak_reserved_bytes"]
        result.memory_timeline = memory.memory_timeline(views.memory, top["rank"], top["device"])


def step_breakdown(views: Views) -> pl.DataFrame:
    """Per step, over its wall-clock range: duration, GPU busy and idle by cause, the kernels and
    all GPU activities (kernels, copies, memsets) launched in it, and whether it is an outlier
    (slower than OUTLIER_FACTOR x its rank's median step)."""
    steps = views.wall_steps
    schema = {"rank": pl.Int32, "step": pl.Int64, "name": pl.String, "start_ns": pl.Int64,
              "end_ns": pl.Int64, "duration_ns": pl.Int64, "busy_ns": pl.Int64,
              "idle_ns": pl.Int64, "idle_host_wait_ns": pl.Int64, "idle_kernel_wait_ns": pl.Int64,
              "idle_other_ns": pl.Int64, "kernel_count": pl.Int64, "launch_count": pl.Int64,
              "outlier": pl.Boolean}
    if steps.is_empty():
        return pl.DataFrame(schema=schema)
    rows = []
    # The columns read, before any filter: a filter of the launches copies every column.
    launches = views.launches.select("rank", "kind", "step", "start_ns", "end_ns")
    gaps = views.gpu_idle_gaps.select("rank", "cause", "start_ns", "end_ns")
    for rank, rank_steps in steps.group_by("rank", maintain_order=True):  # per rank, not event
        acts = launches.filter(pl.col("rank") == rank[0])
        merged = intervals.merge(acts)
        lo, hi = rank_steps["start_ns"].to_numpy(), rank_steps["end_ns"].to_numpy()
        busy = intervals.covered_between(merged, lo, hi)
        # Each gap's time inside each step's wall-clock range: a gap that runs from one step
        # into the next is shared between them, not charged whole to the one it began in.
        by_cause = {}
        rank_gaps = gaps.filter(pl.col("rank") == rank[0])
        for cause in IDLE_CAUSES:
            part = rank_gaps.filter(pl.col("cause") == cause).select("start_ns", "end_ns")
            by_cause[cause] = intervals.covered_between(part.sort("start_ns"), lo, hi)
        # The rest of a step's idle lies before the rank's first GPU activity or after its
        # last (no gap ends there): no work was queued, so the GPU waited for the host.
        rest = (hi - lo) - busy - sum(by_cause.values())
        by_cause["host_wait"] = by_cause["host_wait"] + np.maximum(rest, 0)
        rows.append(rank_steps.with_columns(
            busy_ns=pl.Series(busy, dtype=pl.Int64),
            **{f"idle_{c}_ns": pl.Series(v, dtype=pl.Int64) for c, v in by_cause.items()},
        ))
    frame = pl.concat(rows)
    kernels = (
        launches.filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(kernel_count=(pl.col("kind") == "kernel").sum(), launch_count=pl.len())
    )
    return (
        frame.join(kernels, on=["rank", "step"], how="left")
        .with_columns(
            duration_ns=pl.col("end_ns") - pl.col("start_ns"),
            idle_ns=pl.col("end_ns") - pl.col("start_ns") - pl.col("busy_ns"),
        )
        .fill_null(0)
        # A step much slower than its rank's median (a data-loader hiccup, a checkpoint, a
        # recompilation) is named; docs/metrics.md, "The analysis window". The median is of
        # the steps that launched GPU work: a last step cut short by the profiler, with none,
        # is no measure of the others.
        .with_columns(
            outlier=(pl.col("duration_ns") > OUTLIER_FACTOR * pl.col("duration_ns")
                     .filter(pl.col("launch_count") > 0).median().over("rank"))
            & ((pl.col("launch_count") > 0).sum().over("rank") >= MIN_STEPS_FOR_OUTLIERS))
        .select(list(schema))
        .cast(schema)
        .sort("rank", "step")
    )


def operator_summary(launches: pl.DataFrame, top: int = 50) -> pl.DataFrame:
    """CPU operators ranked by the GPU time of the work they launched."""
    return (
        launches.filter(pl.col("op_name").is_not_null())
        .group_by("op_name")
        .agg(
            gpu_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
            kernel_count=(pl.col("kind") == "kernel").sum().cast(pl.Int64),
            calls=pl.col("correlation").n_unique().cast(pl.Int64),
        )
        .rename({"op_name": "name"})
        .sort(["gpu_ns", "name"], descending=[True, False])
        .head(top)
    )


def utilization(launches: pl.DataFrame, metrics: Metrics,
                buckets: int = UTILIZATION_BUCKETS) -> pl.DataFrame:
    """GPU busy % in equal time buckets across the window (any stream busy counts as busy)."""
    schema = {"bucket_start_ns": pl.Int64, "bucket_end_ns": pl.Int64, "busy_pct": pl.Float64}
    if launches.is_empty() or metrics.span_ns <= 0 or metrics.window_start_ns is None:
        return pl.DataFrame(schema=schema)
    edges = np.linspace(metrics.window_start_ns, metrics.window_end_ns, buckets + 1).astype(np.int64)
    merged = intervals.merge(launches)
    busy = intervals.covered_between(merged, edges[:-1], edges[1:])
    width = np.maximum(edges[1:] - edges[:-1], 1)
    return pl.DataFrame({"bucket_start_ns": edges[:-1], "bucket_end_ns": edges[1:],
                         "busy_pct": 100.0 * busy / width}, schema=schema)


def stream_summary(views: Views) -> pl.DataFrame:
    keys = ["rank", "device", "stream"]
    acts = views.launches
    if acts.is_empty():
        return pl.DataFrame(schema={k: pl.Int64 for k in [*keys, "kernel_count", "busy_ns"]})
    busy = (
        acts.group_by(keys)
        .agg(kernel_count=(pl.col("kind") == "kernel").sum().cast(pl.Int64),
             activity_count=pl.len().cast(pl.Int64),
             busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    )
    idle = views.idle_gaps.group_by(keys).agg(idle_by_cause())
    return busy.join(idle, on=keys, how="left").fill_null(0).sort(keys)


def rank_table(by_rank: dict[int, Metrics]) -> pl.DataFrame:
    return pl.DataFrame([m.to_dict() for _, m in sorted(by_rank.items())], infer_schema_length=None)
