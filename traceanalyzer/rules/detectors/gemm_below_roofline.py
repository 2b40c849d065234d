"""gemm-below-roofline: matrix multiplies far below the throughput their shapes allow."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import ms
from traceanalyzer.rules.detectors._roofline import slow_signatures

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("max_roofline_pct", "min_kernel_us", "min_impact_pct"),
    fields=(
        "shape_count",
        "lost_ms",
        "gemm_ms",
        "top_op",
        "top_shape",
        "top_roofline_pct",
        "top_tflops",
        "roof_tflops",
    ),
)
def gemm_below_roofline(views: Views, p: Params) -> Detection | None:
    """Matrix-multiply signatures (aten::mm, addmm, bmm, baddbmm, _scaled_mm; the performance
    model's class gemm) whose kernels ran below ``max_roofline_pct`` of the roofline at their
    arithmetic intensity; the impact is the time beyond a roofline-speed kernel (``lost_ns``),
    signatures whose kernels average less than ``min_kernel_us`` left out (launch
    latency and the tail bound them, not the kernel); fired when it is at least ``min_impact_pct`` of the window."""
    found = slow_signatures(
        views, p, pl.col("op_class") == "gemm", pl.col("roofline_pct") < p["max_roofline_pct"]
    )
    if found is None:
        return None
    slow, lost = found
    top = slow.row(0, named=True)
    evidence = slow.select(
        pl.col("name").alias("op"),
        pl.col("input_dims").alias("shape"),
        "precision",
        "kernels",
        (pl.col("time_ns") / 1e3).alias("total_us"),
        "achieved_tflops",
        "roof_tflops",
        "roofline_pct",
        (pl.col("lost_ns") / 1e3).alias("lost_us"),
    )
    return Detection(
        impact_ns=lost,
        fields={
            "shape_count": slow.height,
            "lost_ms": ms(lost),
            "gemm_ms": ms(int(slow["time_ns"].sum())),
            "top_op": top["name"],
            "top_shape": top["input_dims"],
            "top_roofline_pct": float(top["roofline_pct"]),
            "top_tflops": float(top["achieved_tflops"]),
            "roof_tflops": float(top["roof_tflops"]),
        },
        evidence=evidence,
    )
