"""launch-overhead-bound: steps of short kernels whose GPU waits for the host to launch them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, kernels_of, ms, own_rank, pct

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("max_kernel_us", "min_short_kernels_pct", "min_kernels_count", "max_launch_gap_us",
            "min_gap_to_run_ratio"),
    fields=("flagged_steps", "steps_seen", "kernels_per_step", "short_kernel_pct",
            "launch_overhead_pct", "median_kernel_us", "gap_ms", "run_ms", "scope"),
    aliases=("launch_overhead",),
)
def launch_overhead_bound(views: Views, p: Params) -> Detection | None:
    """Steps made mostly of short kernels (< ``max_kernel_us``) where the GPU waits for the host
    to launch them (host-wait gaps up to ``max_launch_gap_us``) longer than the kernels run."""
    kernels = kernels_of(views)
    if kernels.height == 0:
        return None
    has_steps = views.steps.height > 0
    step = pl.col("step") if has_steps else pl.lit(0, pl.Int64).alias("step")
    kernels = kernels.with_columns(step).filter(pl.col("step").is_not_null())
    gaps = own_rank(views, views.gpu_idle_gaps).filter(
        pl.col("cause") == "host_wait", pl.col("duration_ns") <= p["max_launch_gap_us"] * NS_PER_US
    ).with_columns(step)
    per_step = kernels.group_by("step").agg(
        kernels=pl.len(),
        short=(pl.col("end_ns") - pl.col("start_ns") < p["max_kernel_us"] * NS_PER_US).sum(),
        run_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
        median_ns=(pl.col("end_ns") - pl.col("start_ns")).median(),
        first_ns=pl.col("start_ns").min(),
        last_ns=pl.col("end_ns").max(),
    ).join(
        gaps.filter(pl.col("step").is_not_null()).group_by("step").agg(
            gap_ns=pl.col("duration_ns").sum(), gaps=pl.len()
        ),
        on="step", how="left",
    ).with_columns(pl.col("gap_ns").fill_null(0), pl.col("gaps").fill_null(0))
    flagged = per_step.filter(
        pl.col("kernels") >= p["min_kernels_count"],
        pl.col("short") * 100 >= p["min_short_kernels_pct"] * pl.col("kernels"),
        pl.col("gap_ns") > p["min_gap_to_run_ratio"] * pl.col("run_ns"),
    )
    if flagged.height == 0:
        return None
    gap_ns = int(flagged["gap_ns"].sum())
    kernels_each = float(flagged["kernels"].mean())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    # Without steps the window is judged as one piece: say so, not "1 of 1 step".
    # One step of several is named, and launches its kernels, not "each".
    steps_of = f"{flagged.height} of {per_step.height} {'step' if per_step.height == 1 else 'steps'}"
    if flagged.height == 1 and per_step.height > 1 and "step" in flagged.columns:
        steps_of += f" (step {flagged['step'][0]})"
    each = " each" if flagged.height > 1 else ""
    scope = (f"{steps_of} launched {kernels_each:,.0f} kernels{each}" if has_steps else
             f"The window (no steps found) launched {kernels_each:,.0f} kernels")
    span = int((flagged["last_ns"] - flagged["first_ns"]).sum())
    evidence = flagged.sort("gap_ns", descending=True).select(
        pl.col("first_ns").alias("start_ns"), pl.col("last_ns").alias("end_ns"), "step",
        "kernels", pl.col("short").alias("short_kernels"),
        (pl.col("run_ns") / NS_PER_US).alias("kernel_run_us"),
        (pl.col("gap_ns") / NS_PER_US).alias("launch_gap_us"),
        (pl.col("median_ns") / NS_PER_US).alias("median_kernel_us"),
    )
    return Detection(
        impact_ns=gap_ns,
        fields={
            "flagged_steps": flagged.height,
            "steps_seen": per_step.height,
            "kernels_per_step": float(flagged["kernels"].mean()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "short_kernel_pct": pct(flagged["short"].sum(), flagged["kernels"].sum()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "launch_overhead_pct": pct(gap_ns, span),
            "median_kernel_us": float((kernels["end_ns"] - kernels["start_ns"]).median() or 0)
            / NS_PER_US,
            "gap_ms": ms(gap_ns),
            "run_ms": ms(flagged["run_ns"].sum()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "scope": scope,
        },
        evidence=evidence,
    )
