"""unfused-optimizer: optimizer steps that launch kernels per parameter."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, kernels_of, ms
from traceanalyzer.rules.detectors._optimizer import (
    BATCHED_OPTIMIZER_KERNEL,
    adam_regions,
    in_ranges,
    optimizer_ranges,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("min_kernels_count",),
    fields=("steps_flagged", "kernels_per_step", "batched_kernels_per_step", "kernel_ms",
            "optimizer_ms", "top_range"),
)
def unfused_optimizer(views: Views, p: Params) -> Detection | None:
    """Optimizer steps that launch at least ``min_kernels_count`` per-parameter kernels (not
    multi-tensor / fused ones); impact = the step's wall time beyond its kernels' run time."""
    ranges = optimizer_ranges(views)
    if ranges.height == 0:
        kernels, ranges = adam_regions(views)
        if kernels is None:
            raise NotApplicable(
                "no optimizer step was recorded (an Optimizer.step#... range) and no per-parameter "
                "Adam kernels (lerp, addcmul, addcdiv) were found"
            )
    else:
        kernels = in_ranges(kernels_of(views), ranges, "_opt").filter(pl.col("_opt").is_not_null())
    if kernels.height == 0:
        return None
    per = kernels.group_by("_opt").agg(
        kernels=pl.len(),
        batched=pl.col("name").str.contains(BATCHED_OPTIMIZER_KERNEL).sum(),
        run_ns=pl.col("dur").sum(),
        gpu_first=pl.col("start_ns").min(),
        gpu_last=pl.col("end_ns").max(),
        range_end=pl.col("_opt_end").first(),
        step=pl.col("step").first(),
    ).with_columns(per_param=pl.col("kernels") - pl.col("batched"))
    flagged = per.filter(pl.col("per_param") >= p["min_kernels_count"])
    if flagged.height == 0:
        return None
    flagged = flagged.with_columns(
        wall_ns=pl.max_horizontal(pl.col("range_end") - pl.col("_opt"),
                                  pl.col("gpu_last") - pl.col("gpu_first")),
    ).with_columns(lost_ns=(pl.col("wall_ns") - pl.col("run_ns")).clip(lower_bound=0))
    names = ranges.filter(pl.col("start_ns").is_in(flagged["_opt"].implode()))
    # ties (a tiled or very regular trace has many equal steps) broken by time: group_by order
    # is arbitrary, and the report must not change from one run to the next
    evidence = flagged.sort(["lost_ns", "_opt"], descending=[True, False]).select(
        pl.col("_opt").alias("start_ns"), pl.max_horizontal("range_end", "gpu_last").alias("end_ns"),
        "step", "kernels", pl.col("batched").alias("batched_kernels"),
        (pl.col("run_ns") / NS_PER_US).alias("kernel_run_us"),
        (pl.col("wall_ns") / NS_PER_US).alias("optimizer_us"),
    )
    return Detection(
        impact_ns=int(flagged["lost_ns"].sum()),
        fields={
            "steps_flagged": flagged.height,
            "kernels_per_step": float(flagged["kernels"].mean()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "batched_kernels_per_step": float(flagged["batched"].mean()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "kernel_ms": ms(flagged["run_ns"].sum()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "optimizer_ms": ms(flagged["wall_ns"].sum()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "top_range": names["name"][0] if names.height else None,
        },
        evidence=evidence,
    )
