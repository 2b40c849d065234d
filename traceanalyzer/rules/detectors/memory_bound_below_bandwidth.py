"""memory-bound-below-bandwidth: memory-bound operators far below the GPU's HBM bandwidth."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.perfmodel.formulas import FLOP_CLASSES
from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import ms
from traceanalyzer.rules.detectors._roofline import slow_signatures

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("max_bandwidth_pct", "min_kernel_us", "min_impact_pct"),
    fields=(
        "op_count",
        "lost_ms",
        "slow_ms",
        "top_op",
        "top_shape",
        "top_gbps",
        "top_bandwidth_pct",
        "bandwidth_gbps",
        "datasheet_gbps",
    ),
)
def memory_bound_below_bandwidth(views: Views, p: Params) -> Detection | None:
    """Memory operators (norms, softmax, elementwise, copies, reductions, embedding: not the
    model-FLOP classes, which gemm-below-roofline judges) left of the ridge point whose kernels
    moved their bytes at less than ``max_bandwidth_pct`` of the *reachable* HBM bandwidth (what
    a large device copy reaches, devices.REACHABLE_HBM_FRACTION of the datasheet's); the impact
    is the time beyond moving those bytes at that bandwidth, signatures whose kernels average
    less than ``min_kernel_us`` left out (launch latency and the tail bound them, not the
    kernel); fired when it is at least ``min_impact_pct`` of the window."""
    found = slow_signatures(
        views,
        p,
        pl.col("bound") == "memory",
        ~pl.col("op_class").is_in(list(FLOP_CLASSES)),
        pl.col("reachable_pct") < p["max_bandwidth_pct"],
        lost="reachable_lost_ns",
    )
    if found is None:
        return None
    slow, lost = found
    top = slow.row(0, named=True)
    evidence = slow.select(
        pl.col("name").alias("op"),
        pl.col("input_dims").alias("shape"),
        "op_class",
        "kernels",
        (pl.col("time_ns") / 1e3).alias("total_us"),
        (pl.col("bytes") / 1e6).alias("mbytes"),
        "achieved_gbps",
        pl.col("reachable_pct").alias("bandwidth_pct"),
        "roofline_pct",
        (pl.col("reachable_lost_ns") / 1e3).alias("lost_us"),
    )
    return Detection(
        impact_ns=lost,
        fields={
            "op_count": slow.height,
            "lost_ms": ms(lost),
            "slow_ms": ms(int(slow["time_ns"].sum())),
            "top_op": top["name"],
            "top_shape": top["input_dims"],
            "top_gbps": float(top["achieved_gbps"]),
            "top_bandwidth_pct": float(top["reachable_pct"]),
            "bandwidth_gbps": float(top["reachable_gbps"]),
            "datasheet_gbps": float(top["bandwidth_gbps"]),
        },
        evidence=evidence,
    )
