"""Summary tables like ``nsys stats``'s reports (``traceanalyzer stats``), for a trace of any format.

Unlike the other reports these read the canonical frames of a trace, not an analysis result.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.model import API_KINDS, Trace

#: The ``--report`` names: kernels (cuda_gpu_kern_sum), api (cuda_api_sum), memops
#: (cuda_gpu_mem_time_sum), nvtx (nvtx_sum).
REPORTS = ("kernels", "api", "memops", "nvtx")


def stats_frame(trace: Trace, report: str) -> pl.DataFrame:
    """The summary frame for one ``--report`` name."""
    from traceanalyzer.analysis.kernels import kernel_summary

    if report == "kernels":
        return kernel_summary(trace.gpu)
    if report == "api":
        calls = trace.cpu.filter(pl.col("kind").is_in(API_KINDS))
        return _duration_summary(calls, "name")
    if report == "memops":
        ops = trace.gpu.filter(pl.col("kind").is_in(["memcpy", "memset"])).with_columns(
            operation=pl.when(pl.col("kind") == "memset").then(pl.lit("memset"))
            .otherwise(pl.concat_str(pl.lit("memcpy "), pl.col("copy_kind").cast(pl.String)
                                     .fill_null("?")))
        )
        summary = _duration_summary(ops, "operation")
        bytes_by_op = ops.group_by("operation").agg(total_bytes=pl.col("bytes").sum())
        return summary.join(bytes_by_op, on="operation", how="left")
    ranges = trace.annotations.filter(pl.col("kind").is_in(["nvtx", "user", "step", "gpu_user"]))
    return _duration_summary(ranges, "name")


def _duration_summary(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    dur = pl.col("end_ns") - pl.col("start_ns")
    if frame.is_empty():
        return pl.DataFrame(schema={key: pl.String, "pct_time": pl.Float64, "total_ns": pl.Int64,
                                    "count": pl.Int64, "mean_ns": pl.Float64,
                                    "median_ns": pl.Float64, "min_ns": pl.Int64,
                                    "max_ns": pl.Int64, "stddev_ns": pl.Float64})
    grand = max(int(frame.select(dur.sum()).item() or 0), 1)
    return (
        frame.group_by(key)
        .agg(total_ns=dur.sum(), count=pl.len().cast(pl.Int64), mean_ns=dur.mean(),
             median_ns=dur.median(), min_ns=dur.min(), max_ns=dur.max(),
             stddev_ns=dur.std().fill_null(0.0))
        .with_columns(pct_time=100.0 * pl.col("total_ns") / grand)
        .sort(["total_ns", key], descending=[True, False])
        .select(key, "pct_time", "total_ns", "count", "mean_ns", "median_ns", "min_ns", "max_ns",
                "stddev_ns")
    )
