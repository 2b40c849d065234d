"""odd-matmul-shape: matrix multiplies whose shapes do not suit the tensor cores."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, kernels_of, ms, own_rank, pct
from traceanalyzer.rules.detectors._gemm import (
    EXTRA_GEMM,
    HALF_KERNEL,
    gemm_shapes,
    saving_matters,
    shapes_by_time,
    with_gpu_time,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: GEMM kernels built for unaligned operands: cuBLAS falls back to them (often an older
#: architecture's CUTLASS kernel, e.g. cutlass_75_..._align1) when a leading dimension is not a
#: multiple of 16 bytes. "alignN" counts elements: 1, 2 or 4 is unaligned for 16-bit types.
UNALIGNED_KERNEL = r"(?i)align[abc]?[124]([^0-9]|$)"
ALIGN1_KERNEL = r"(?i)align[abc]?1([^0-9]|$)"
ALIGN2_KERNEL = r"(?i)align[abc]?[24]([^0-9]|$)"  # align2 and align4


def _gain_of_kernel(kernel: pl.Expr, p: Params) -> pl.Expr:
    """Share of an unaligned GEMM's time that padding saves, from the kernel cuBLAS ran: when it
    fell back to a 16-bit kernel built for unaligned operands, ``fallback_gain_pct`` (align1; on
    an H200 an sm75-era CUTLASS kernel) or ``align2_gain_pct`` (align2 and align4, an sm80 one);
    otherwise ``expected_gain_pct``. The defaults are what padding saved on an H200 (the rule
    file's rationale gives the figures)."""
    half = kernel.str.contains(HALF_KERNEL)
    align1 = half & kernel.str.contains(ALIGN1_KERNEL)
    align2 = half & kernel.str.contains(ALIGN2_KERNEL)
    return (pl.when(align1.fill_null(False)).then(float(p["fallback_gain_pct"]))
            .when(align2.fill_null(False)).then(float(p["align2_gain_pct"]))
            .otherwise(float(p["expected_gain_pct"])) / 100.0)


def _unaligned_by_kernel_name(views: Views, kernels: pl.DataFrame, total: int,
                              p: Params) -> Detection | None:
    """Without recorded shapes, the kernel a GEMM ran tells whether its operands were aligned."""
    gemm = kernels.filter(
        (pl.col("category") == "gemm") | pl.col("name").str.contains(EXTRA_GEMM)
    ).with_columns(gpu_ns=pl.col("end_ns") - pl.col("start_ns"))
    # Only 16-bit tensor-core kernels: FP32 SIMT kernels come in align1 variants for any layout.
    bad = gemm.filter(
        pl.col("name").str.contains(HALF_KERNEL),
        pl.col("name").str.contains(UNALIGNED_KERNEL),
    )
    bad = bad.with_columns(gain=_gain_of_kernel(pl.col("name"), p))
    odd_ns = int(bad["gpu_ns"].sum() or 0)
    if bad.height == 0:
        raise NotApplicable(
            "input shapes were not recorded (profile with record_shapes=True), and no GEMM kernel "
            "name shows unaligned operands"
        )
    if not total or pct(odd_ns, total) < p["min_gpu_time_pct"]:
        return None
    impact = int((bad["gpu_ns"] * bad["gain"]).sum() or 0)
    if not saving_matters(views, impact, p):
        return None
    groups = bad.group_by("name").agg(
        pl.len().alias("calls"), pl.col("gpu_ns").sum(), pl.col("stream").first(),
        pl.col("op_name").drop_nulls().first().alias("op"),
    ).sort(["gpu_ns", "name"], descending=[True, False])
    evidence = groups.select(
        pl.col("name").alias("kernel"), "calls", (pl.col("gpu_ns") / NS_PER_US).alias("gpu_us"),
        "op", "stream",
    )
    return Detection(
        impact_ns=impact,
        fields={
            "odd_ms": ms(odd_ns),
            "odd_pct": pct(odd_ns, total),
            "gemm_count": bad.height,
            "shape_count": groups.height,
            # Shapes are not recorded here: the GEMMs are grouped by kernel, not by shape.
            "groups": f"{groups.height} kernel{'' if groups.height == 1 else 's'} "
                      "(shapes not recorded)",
            "top_shape": "operands its name says are unaligned",
            "top_op": groups["name"][0],
        },
        evidence=evidence,
    )


@detector(
    params=("min_dim_count", "large_dim_count", "min_gpu_time_pct", "expected_gain_pct",
            "fallback_gain_pct", "align2_gain_pct", "min_impact_pct"),
    fields=("odd_ms", "odd_pct", "gemm_count", "shape_count", "groups", "top_shape", "top_op"),
)
def odd_matmul_shape(views: Views, p: Params) -> Detection | None:
    """GEMMs whose M, N or K is not a multiple of 8, or whose N or K (the model's dimensions) is
    at least ``large_dim_count`` and not a multiple of 64, from recorded shapes; fires when they
    take ``min_gpu_time_pct`` of kernel time and the saving is ``min_impact_pct`` of the window."""
    kernels = kernels_of(views)
    total = int((kernels["end_ns"] - kernels["start_ns"]).sum() or 0)
    if views.cpu["input_dims"].null_count() == views.cpu.height:
        return _unaligned_by_kernel_name(views, kernels, total, p)
    shapes = own_rank(views, gemm_shapes(views))
    if shapes.height == 0:
        return None
    shapes = with_gpu_time(shapes, kernels)

    def odd8(d: str) -> pl.Expr:
        return (pl.col(d) >= p["min_dim_count"]) & (pl.col(d) % 8 != 0)

    def odd64(d: str) -> pl.Expr:
        # M is batch x sequence (data); the x64 rule is for the model's own dimensions N and K.
        return (d != "m") & (pl.col(d) >= p["large_dim_count"]) & (pl.col(d) % 64 != 0)

    def odd(d: str) -> pl.Expr:
        return odd8(d) | (odd64(d) if d != "m" else pl.lit(False))

    def tile_waste(d: str) -> pl.Expr:
        padded = ((pl.col(d) + 63) // 64) * 64
        return pl.when(odd64(d)).then((padded - pl.col(d)) / padded).otherwise(0.0)

    # The kernel that ran says whether the misalignment cost the fast tensor-core kernels (a
    # fallback kernel); if it did not, only the partial last tile of N or K is wasted.
    gain = pl.max_horizontal(_gain_of_kernel(pl.col("kernel"), p), tile_waste("n"),
                             tile_waste("k"))
    # Only GEMMs padding would speed up: an unaligned M in a kernel that did not fall back
    # costs nothing measurable (see _gain_of_kernel).
    bad = shapes.filter(odd("m") | odd("n") | odd("k"), gain > 0).with_columns(
        saving_ns=pl.col("gpu_ns") * gain,
        odd_dims=pl.concat_str(
            pl.when(odd("m")).then(pl.lit("M")).otherwise(pl.lit("")),
            pl.when(odd("n")).then(pl.lit("N")).otherwise(pl.lit("")),
            pl.when(odd("k")).then(pl.lit("K")).otherwise(pl.lit("")),
        ),
        shape=pl.format("M={} N={} K={}", "m", "n", "k"),
    )
    odd_ns = int(bad["gpu_ns"].sum() or 0)
    if bad.height == 0 or not total or pct(odd_ns, total) < p["min_gpu_time_pct"]:
        return None
    impact = int(bad["saving_ns"].sum() or 0)
    if not saving_matters(views, impact, p):
        return None
    groups = shapes_by_time(bad, ["name", "shape", "odd_dims"], "input_types")
    evidence = groups.select(
        pl.col("name").alias("op"), "shape", "odd_dims", "calls",
        (pl.col("gpu_ns") / NS_PER_US).alias("gpu_us"), "kernel", "stream", "input_types",
    )
    return Detection(
        impact_ns=impact,
        fields={
            "odd_ms": ms(odd_ns),
            "odd_pct": pct(odd_ns, total),
            "gemm_count": bad.height,
            "shape_count": groups.height,
            "groups": f"{groups.height} shape{'' if groups.height == 1 else 's'}",
            "top_shape": groups["shape"][0],
            "top_op": groups["name"][0],
        },
        evidence=evidence,
    )
