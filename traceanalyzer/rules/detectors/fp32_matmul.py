"""fp32-matmul: matrix multiplies in FP32/TF32 on a GPU with BF16/FP16 tensor cores."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    INPUT_COLUMNS,
    NS_PER_US,
    kernels_of,
    ms,
    origin,
    pct,
    with_inputs,
)
from traceanalyzer.rules.detectors._gemm import EXTRA_GEMM, HALF_KERNEL, saving_matters
from traceanalyzer.texts import matches

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: Kernel names that say FP32 (SIMT) or TF32 tensor-core math.
FP32_KERNEL = r"(?i)sgemm|tf32|s1688|s16816|s884|s161616|f32f32_f32|gemm_f32|_fp32|gemmsn|gemv2t|gemvnsp|dgemm|nvjet_(sm\d+_)?ss"
#: Recorded operator input types that are 32/64-bit floating point.
FP32_TYPES = r'"(float|double)"'
HALF_TYPES = r"BFloat16|Half|Float8"


@detector(
    params=("min_gpu_time_pct", "expected_speedup_ratio", "min_impact_pct"),
    fields=("fp32_ms", "fp32_pct", "kernel_count", "tf32_pct", "top_kernel", "top_op"),
)
def fp32_matmul(views: Views, p: Params) -> Detection | None:
    """GEMM kernels in FP32/TF32 (by kernel name, or by the operator's recorded input dtypes) on a
    GPU with BF16/FP16 tensor cores, when they take ``min_gpu_time_pct`` of kernel time and the
    saving is ``min_impact_pct`` of the window."""
    caps = [d.compute_capability for d in views.meta.devices if d.compute_capability]
    vendors = {d.vendor for d in views.meta.devices}
    if caps and "amd" not in vendors:
        try:
            if max(float(c) for c in caps) < 7.0:
                raise NotApplicable("the GPU has no FP16/BF16 tensor cores (compute capability < 7.0)")
        except ValueError:
            pass
    kernels = kernels_of(views)
    total = int(kernels["dur"].sum() or 0)
    gemm = kernels.filter((pl.col("category") == "gemm") | matches(kernels["name"], EXTRA_GEMM))
    if gemm.height == 0 or not total:
        return None
    # The operators' shapes and types of the GEMMs alone (not of every kernel).
    gemm = with_inputs(views, gemm, {c: c for c in INPUT_COLUMNS})
    by_types = pl.col("input_types").fill_null("").str.contains(FP32_TYPES) & ~pl.col(
        "input_types"
    ).fill_null("").str.contains(HALF_TYPES)
    fp32 = gemm.filter(
        ~pl.col("name").str.contains(HALF_KERNEL)
        & (pl.col("name").str.contains(FP32_KERNEL) | by_types)
    ).with_columns(tf32=pl.col("name").str.contains(r"(?i)tf32|s1688|s16816|s884|s161616"))
    fp32_ns = int(fp32["dur"].sum() or 0)
    if fp32.height == 0 or pct(fp32_ns, total) < p["min_gpu_time_pct"]:
        return None
    speedup = float(p["expected_speedup_ratio"])
    impact = int(fp32_ns * (1 - 1 / speedup)) if speedup > 1 else 0
    if not saving_matters(views, impact, p):
        return None
    by_name = fp32.group_by("name").agg(
        pl.col("dur").sum(), n=pl.len(), op=pl.col("input_op").drop_nulls().mode().sort().first(),
        types=pl.col("input_types").drop_nulls().first(), stream=pl.col("stream").first(),
        start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max(),
    ).sort(["dur", "name"], descending=[True, False])
    ops = fp32.filter(pl.col("input_op").is_not_null()).group_by("input_op").agg(
        pl.col("dur").sum()
    ).sort(["dur", "input_op"], descending=[True, False])
    evidence = by_name.select(
        "name", pl.col("n").alias("instances"), (pl.col("dur") / NS_PER_US).alias("total_us"),
        "op", pl.col("types").alias("input_types"), "stream",
    )
    return Detection(
        impact_ns=impact,
        fields={
            "fp32_ms": ms(fp32_ns),
            "fp32_pct": pct(fp32_ns, total),
            "kernel_count": fp32.height,
            "tf32_pct": pct(fp32.filter("tf32")["dur"].sum(), fp32_ns),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "top_kernel": by_name["name"][0],
            "top_op": ops["input_op"][0] if ops.height else origin(views, fp32["launch_name"]),
        },
        evidence=evidence,
    )
