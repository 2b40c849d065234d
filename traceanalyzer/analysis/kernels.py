"""Kernel summary per name, like ``nsys stats -r cuda_gpu_kern_sum``."""

from __future__ import annotations

import polars as pl

KERNEL_SUMMARY_SCHEMA = {
    "name": pl.String, "category": pl.String, "instances": pl.Int64, "total_ns": pl.Int64,
    "mean_ns": pl.Float64, "median_ns": pl.Float64, "min_ns": pl.Int64, "max_ns": pl.Int64,
    "stddev_ns": pl.Float64, "pct_gpu_time": pl.Float64,
}


def kernel_summary(gpu: pl.DataFrame) -> pl.DataFrame:
    """One row per kernel name: instances, total, mean, median, min, max, stddev (ns), and the
    share of all kernel time, sorted by total time (ties by name, so output is deterministic).

    Only kernels count, as in ``cuda_gpu_kern_sum``; copies and memsets have their own reports.
    """
    kernels = gpu.filter(pl.col("kind") == "kernel").with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns")
    )
    if kernels.is_empty():
        return pl.DataFrame(schema=KERNEL_SUMMARY_SCHEMA)
    grand_total = kernels["dur"].sum()
    return (
        kernels.group_by("name")
        .agg(
            category=pl.col("category").first().cast(pl.String),
            instances=pl.len().cast(pl.Int64),
            total_ns=pl.col("dur").sum(),
            mean_ns=pl.col("dur").mean(),
            median_ns=pl.col("dur").median(),
            min_ns=pl.col("dur").min(),
            max_ns=pl.col("dur").max(),
            stddev_ns=pl.col("dur").std().fill_null(0.0),
        )
        .with_columns(pct_gpu_time=100.0 * pl.col("total_ns") / max(grand_total, 1))
        .sort(["total_ns", "name"], descending=[True, False])
        .select(list(KERNEL_SUMMARY_SCHEMA))
        .cast(KERNEL_SUMMARY_SCHEMA)
    )


def category_summary(gpu: pl.DataFrame) -> pl.DataFrame:
    """One row per category: count, total_ns and share of all GPU activity time."""
    acts = gpu.with_columns(dur=pl.col("end_ns") - pl.col("start_ns"))
    grand_total = max(int(acts["dur"].sum() or 0), 1)
    return (
        acts.group_by(pl.col("category").cast(pl.String))
        .agg(count=pl.len().cast(pl.Int64), total_ns=pl.col("dur").sum())
        .with_columns(pct_gpu_time=100.0 * pl.col("total_ns") / grand_total)
        .sort(["total_ns", "category"], descending=[True, False])
    )
