"""``traceanalyzer stats``: summary tables like ``nsys stats``, for any input format."""

from __future__ import annotations

from pathlib import Path

import click
import polars as pl

from traceanalyzer.cli.common import cache_options, frame_output, trace_processor_option
from traceanalyzer.model import API_KINDS

REPORTS = ("kernels", "api", "memops", "nvtx")


@click.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--report", "report", type=click.Choice(REPORTS), default="kernels",
              show_default=True, help="kernels: per kernel name (cuda_gpu_kern_sum); api: per "
              "CUDA/HIP API (cuda_api_sum); memops: copies and memsets (cuda_gpu_mem_time_sum); "
              "nvtx: NVTX and user ranges (nvtx_sum).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.option("--limit", type=int, default=None, help="Print only the first N rows.")
@trace_processor_option
@cache_options
def stats(trace: Path, report: str, fmt: str, limit: int | None,
          trace_processor: Path | None, use_cache: bool,
          cache_dir: Path | None) -> None:
    """Print a summary table of TRACE (any supported format)."""
    from traceanalyzer.ingest import load

    loaded = load(trace, use_cache=use_cache, cache_dir=cache_dir, trace_processor=trace_processor)
    frame = stats_frame(loaded, report)
    if limit is not None:
        frame = frame.head(limit)
    click.echo(frame_output(frame, fmt), nl=fmt == "table")


def stats_frame(trace, report: str) -> pl.DataFrame:  # type: ignore[no-untyped-def]
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
