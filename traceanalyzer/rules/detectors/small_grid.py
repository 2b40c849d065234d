"""small-grid: kernels launched with fewer blocks than the GPU has SMs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, kernels_of, ms, pct, window_length

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


@detector(
    params=("max_blocks_pct", "min_kernel_us", "min_gpu_time_pct", "min_saving_pct"),
    fields=("kernel_names", "small_ms", "small_pct", "sm_count", "top_kernel", "top_blocks",
            "saving_ms"),
)
def small_grid(views: Views, p: Params) -> Detection | None:
    """Kernels launched with fewer blocks than ``max_blocks_pct`` of the device's SMs, per kernel
    name, when such a kernel takes at least ``min_gpu_time_pct`` of kernel time and the SMs they
    leave idle cost at least ``min_saving_pct`` of the window (communication kernels excluded:
    NCCL uses few blocks by design)."""
    # The columns read, before the filters and the join: each eager step copies every column
    # it is given, and the kernels frame has thirty.
    kernels = kernels_of(views).select(
        "device", "category", "grid_x", "grid_y", "grid_z", "dur", "name", "stream", "op_name",
    ).filter(pl.col("grid_x").is_not_null())
    if kernels.height == 0:
        return None
    devices = kernels["device"].unique().to_list()
    sms = {d: views.device_sm_count(d) for d in devices}
    if not any(sms.values()):
        raise NotApplicable("the GPU's SM count was not recorded")
    total = int(kernels_of(views)["dur"].sum() or 0)
    sm_table = pl.DataFrame(
        {"device": list(sms), "sm_count": [sms[d] for d in sms]},
        schema={"device": pl.Int32, "sm_count": pl.Int64},
    )
    blocks = pl.col("grid_x").cast(pl.Int64) * pl.col("grid_y").fill_null(1) * pl.col("grid_z").fill_null(1)
    is_small = pl.col("blocks") * 100 < pl.col("sm_count") * p["max_blocks_pct"]
    small = (
        kernels.filter(pl.col("category") != "communication")
        .join(sm_table, on="device", how="inner")
        .with_columns(blocks=blocks)
        # a kernel of a few µs is bound by launch latency and its tail: more blocks would not help
        .filter(pl.col("dur") >= p["min_kernel_us"] * NS_PER_US)
        # judge a kernel by its typical launch: multi-tensor kernels launch a short last chunk
        .filter((pl.col("blocks").median() * 100 < pl.col("sm_count").first() * p["max_blocks_pct"])
                .over("name"))
        .filter(is_small)
    )
    if small.height == 0 or not total:
        return None
    by_name = small.group_by("name").agg(
        pl.col("dur").sum(), n=pl.len(), blocks=pl.col("blocks").median(),
        sm_count=pl.col("sm_count").first(), stream=pl.col("stream").first(),
        op=pl.col("op_name").drop_nulls().first(),
        # upper bound: the time the idle SMs could have taken off with a full grid
        saving=(pl.col("dur") * (1 - pl.col("blocks") / pl.col("sm_count"))).sum(),
    ).filter(pl.col("dur") * 100 >= p["min_gpu_time_pct"] * total).sort(
        ["dur", "name"], descending=[True, False]
    )
    saving = int(by_name["saving"].sum() or 0)
    window = window_length(views)
    if by_name.height == 0 or not window or pct(saving, window) < p["min_saving_pct"]:
        return None
    small_ns = int(by_name["dur"].sum())
    evidence = by_name.select(
        "name", pl.col("n").alias("instances"), "blocks", "sm_count",
        (pl.col("dur") / NS_PER_US).alias("total_us"),
        (100.0 * pl.col("dur") / total).alias("gpu_time_pct"), "op", "stream",
    )
    return Detection(
        impact_ns=saving,
        fields={
            "saving_ms": ms(saving),
            "kernel_names": by_name.height,
            "small_ms": ms(small_ns),
            "small_pct": pct(small_ns, total),
            "sm_count": int(by_name["sm_count"][0]),
            "top_kernel": by_name["name"][0],
            "top_blocks": float(by_name["blocks"][0]),
        },
        evidence=evidence,
    )
