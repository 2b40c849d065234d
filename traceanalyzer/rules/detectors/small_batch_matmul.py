"""small-batch-matmul: matrix multiplies of a weight with only a few rows of activations."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    element_bytes,
    kernels_of,
    ms,
    own_rank,
    pct,
)
from traceanalyzer.rules.detectors._gemm import (
    gemm_shapes,
    saving_matters,
    shapes_by_time,
    with_gpu_time,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: GEMM operators whose second matrix is a weight (one read serves every row of the first): not
#: bmm and friends, whose two matrices are both activations.
WEIGHT_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::_scaled_mm")
#: cuBLAS kernels for a matrix multiply with only a few rows on one side, for traces without
#: shapes: its GEMV kernels (one row) and nvjet kernels with a tile of 16 or fewer on one side
#: (nvjet_sm90_tst_128x8_...: cuBLAS picks such a tile only when a side is that small).
_NVJET_TILE = r"^nvjet_(?:sm\d+_)?[a-z]+_(\d+)x(\d+)_"


def _rows_of_kernel(name: pl.Expr, max_rows: int) -> pl.Expr:
    """The most rows a small-batch GEMM kernel can have had, by its name; null if not one."""
    tile = name.str.extract_groups(_NVJET_TILE)
    side = pl.min_horizontal(tile.struct.field("1").cast(pl.Int64),
                             tile.struct.field("2").cast(pl.Int64))
    return (pl.when(name.str.contains("(?i)gemv")).then(pl.lit(1, pl.Int64))
            .when(side <= max_rows).then(side))


@detector(
    params=("max_row_count", "min_weight_count", "min_kernel_us", "target_row_count",
            "min_gpu_time_pct", "min_impact_pct"),
    fields=("gemm_count", "gemm_ms", "gemm_pct", "rows", "top_shape", "top_op", "intensity",
            "target_row_count"),
)
def small_batch_matmul(views: Views, p: Params) -> Detection | None:
    """Matrix multiplies of a weight with at most ``max_row_count`` rows of activations (from
    recorded shapes, else from cuBLAS's kernel names): memory-bound by the weight's read. The
    impact is the GEMM time that ``target_row_count`` rows per call would save per row; fires
    when the GEMMs take ``min_gpu_time_pct`` of kernel time and the saving is ``min_impact_pct``
    of the window."""
    kernels = kernels_of(views)
    total = int((kernels["end_ns"] - kernels["start_ns"]).sum() or 0)
    if not total:
        return None
    target = p["target_row_count"]
    has_shapes = views.cpu["input_dims"].null_count() < views.cpu.height
    if has_shapes:
        shapes = own_rank(views, gemm_shapes(views)).filter(
            pl.col("name").is_in(WEIGHT_GEMM_OPS), pl.col("m") <= p["max_row_count"],
            pl.col("n") * pl.col("k") >= p["min_weight_count"],
        )
        small = with_gpu_time(shapes, kernels).with_columns(
            rows=pl.col("m"), op=pl.col("name"),
            # 2MNK FLOPs over the bytes of the three matrices, at the first input's element size
            intensity=2 * pl.col("m") * pl.col("n") * pl.col("k")
            / ((pl.col("m") * pl.col("k") + pl.col("k") * pl.col("n") + pl.col("m") * pl.col("n"))
               * element_bytes(pl.col("input_types"))),
        ).with_columns(shape=pl.format("M={} N={} K={}", "m", "n", "k") + pl.format(
            " (~{} FLOP per byte moved)", pl.col("intensity").round(1)).fill_null(""))
    else:
        # The weight's size is unknown here: short calls are left out, since their time is
        # launch latency rather than the weight's read.
        small = kernels.with_columns(rows=_rows_of_kernel(pl.col("name"), p["max_row_count"])).filter(
            pl.col("rows").is_not_null(),
            pl.col("end_ns") - pl.col("start_ns") >= p["min_kernel_us"] * NS_PER_US,
        ).with_columns(gpu_ns=pl.col("end_ns") - pl.col("start_ns"), kernel=pl.col("name"),
                       op=pl.lit(None, pl.String),
                       shape=pl.format("at most {} rows (by its name)", "rows"),
                       intensity=pl.lit(None, pl.Float64))
    small = small.filter(pl.col("rows") < target)
    small_ns = int(small["gpu_ns"].sum() or 0)
    if small.height == 0 or pct(small_ns, total) < p["min_gpu_time_pct"]:
        return None
    # Batched to target_row_count rows, a call would read its weight once for that many rows and
    # take about as long (memory-bound either way): per row, all but rows/target of it is saved.
    impact = int(small.select((pl.col("gpu_ns") * (1 - pl.col("rows") / target)).sum()).item())
    if not saving_matters(views, impact, p):
        return None
    # Without shapes each kernel is its own row: cuBLAS may run one shape as several kernels
    # (a split-K and a plain variant of one tile), and the evidence must name them all.
    keys = ["op", "shape", "rows"] + ([] if has_shapes else ["kernel"])
    groups = shapes_by_time(small, keys, "intensity")
    top = groups.row(0, named=True)
    return Detection(
        impact_ns=impact,
        fields={
            "gemm_count": small.height,
            "gemm_ms": ms(small_ns),
            "gemm_pct": pct(small_ns, total),
            "rows": int(small["rows"].max()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "top_shape": top["shape"],
            "top_op": top["op"] or top["kernel"],
            "intensity": top["intensity"],
            "target_row_count": target,
        },
        evidence=groups.select(
            "op", "shape", "rows", "calls", (pl.col("gpu_ns") / NS_PER_US).alias("gpu_us"),
            "intensity", "kernel", "stream",
        ),
    )
