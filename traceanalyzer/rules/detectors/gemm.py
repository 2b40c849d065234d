"""Detectors about matrix multiplies: FP32/TF32 GEMMs and shapes that do not suit tensor cores."""

from __future__ import annotations

import weakref

import polars as pl

from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, ms, own_rank, pct, window_length

#: Kernel names that say the GEMM runs in 16-bit or 8-bit precision (checked first).
#: cuBLAS's nvjet kernels name their types after the architecture: nvjet_sm90_tst_... (a letter
#: per operand: h = FP16, t = BF16, e/q = FP8, s = FP32). Its GEMV kernels name their template
#: types in full (gemv2T_kernel_val<int, int, __nv_bfloat16, ...>, ... __half ...).
HALF_KERNEL = r"(?i)bf16|bfloat16|f16|fp16|half|hgemm|h1688|h16816|h884|e4m3|e5m2|fp8|imma|int8|nvjet_(sm\d+_)?[htqeb]"
#: Kernel names that say FP32 (SIMT) or TF32 tensor-core math.
FP32_KERNEL = r"(?i)sgemm|tf32|s1688|s16816|s884|s161616|f32f32_f32|gemm_f32|_fp32|gemmsn|gemv2t|gemvnsp|dgemm|nvjet_(sm\d+_)?ss"
#: GEMM kernels the shared categories may not know yet (cuBLAS's nvjet kernels on Hopper).
EXTRA_GEMM = r"(?i)^nvjet"
#: Recorded operator input types that are 32/64-bit floating point.
FP32_TYPES = r'"(float|double)"'
HALF_TYPES = r"BFloat16|Half|Float8"
#: Leaf GEMM operators (they launch the kernels; aten::linear/matmul call into them) and the
#: positions of their two matrix inputs.
GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1),
            "aten::baddbmm": (1, 2), "aten::addbmm": (1, 2), "aten::_scaled_mm": (0, 1)}


def first_input_dims(dims: pl.Expr) -> pl.Expr:
    """Shape of an operator's first input from Kineto's ``Input Dims`` JSON text, as a list of ints.

    Inputs can be nested (tensor lists), so the text is not decoded as a whole: the first
    innermost ``[...]`` is the first tensor's shape.
    """
    return dims.str.extract(r"(\[[0-9,\s-]*\])", 1).str.json_decode(pl.List(pl.Int64))


_DTYPE_BYTES = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "double": 8,
                "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "int": 4, "long int": 8, "bool": 1}


def element_bytes(input_types: pl.Expr) -> pl.Expr:
    """Bytes per element of an operator's first input, from Kineto's ``Input type`` JSON text."""
    return input_types.str.extract(r'^\[\s*"([^"]*)"', 1).replace_strict(
        _DTYPE_BYTES, default=None, return_dtype=pl.Int64)


_SHAPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def op_inputs(views) -> pl.DataFrame:
    """Operators with recorded inputs, one per (rank, external_id), the innermost (last started):
    input_op, input_dims, input_types, and for the first input numel, ndim, last_dim and
    tensor_bytes. Computed once per views; shapes are parsed once per distinct text."""
    try:
        return _SHAPES[views]
    except (KeyError, TypeError):
        pass
    ops = (
        views.cpu.filter(pl.col("kind") == "op", pl.col("external_id").is_not_null())
        .sort("start_ns")
        .unique(["rank", "external_id"], keep="last", maintain_order=True)
        .select("rank", "external_id", pl.col("name").alias("input_op"), "input_dims", "input_types")
    )
    shapes = ops.select("input_dims", "input_types").unique().filter(
        pl.col("input_dims").is_not_null()
    ).with_columns(
        _first=first_input_dims(pl.col("input_dims")),
        # sizes of every tensor input (the innermost [...] lists)
        _numels=pl.col("input_dims").str.extract_all(r"\[[0-9, -]*\]").list.eval(
            pl.element().str.json_decode(pl.List(pl.Int64)).list.eval(pl.element().product())
            .list.first()
        ),
    ).with_columns(
        numel=pl.col("_first").list.eval(pl.element().product()).list.first(),
        full_inputs=pl.col("_numels").list.eval(
            (pl.element() == pl.element().first()).cast(pl.Int64)).list.sum(),
        ndim=pl.col("_first").list.len().cast(pl.Int64),
        last_dim=pl.col("_first").list.last(),
    ).with_columns(
        tensor_bytes=pl.col("numel") * element_bytes(pl.col("input_types"))
    ).drop("_first", "_numels")
    out = ops.join(shapes, on=["input_dims", "input_types"], how="left", nulls_equal=True)
    try:
        _SHAPES[views] = out
    except TypeError:
        pass
    return out


def _kernels_with_ops(views) -> pl.DataFrame:
    kernels = own_rank(views, views.launches).filter(pl.col("kind") == "kernel")
    return kernels.join(op_inputs(views), on=["rank", "external_id"], how="left").with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns")
    )


def _matters(views, impact_ns: int, p: Params) -> bool:
    """Whether a GEMM saving is worth a finding: a share of kernel time alone is not, when the
    GPU mostly idles (two FP32 GEMMs of 30 µs in a 9 ms window are 27% of its kernel time)."""
    window = window_length(views)
    return bool(window) and pct(impact_ns, window) >= p["min_impact_pct"]


@detector(
    "fp32_matmul",
    params=("min_gpu_time_pct", "expected_speedup_ratio", "min_impact_pct"),
    fields=("fp32_ms", "fp32_pct", "kernel_count", "tf32_pct", "top_kernel", "top_op"),
)
def fp32_matmul(views, p: Params) -> Detection | None:
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
    kernels = _kernels_with_ops(views)
    total = int(kernels["dur"].sum() or 0)
    gemm = kernels.filter((pl.col("category") == "gemm") | pl.col("name").str.contains(EXTRA_GEMM))
    if gemm.height == 0 or not total:
        return None
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
    if not _matters(views, impact, p):
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
            "tf32_pct": pct(fp32.filter("tf32")["dur"].sum(), fp32_ns),
            "top_kernel": by_name["name"][0],
            "top_op": ops["input_op"][0] if ops.height else "an unrecorded operator",
        },
        evidence=evidence,
    )


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
    otherwise ``expected_gain_pct``. Measured on an H200 (scripts/measure/gemm_padding.py,
    results beside it): padding saved 73-84% of align1 GEMMs' time, 59-63% of align2 ones', and
    -5 to +6% (noise) of GEMMs that kept the sm90 kernels with an unaligned M."""
    half = kernel.str.contains(HALF_KERNEL)
    align1 = half & kernel.str.contains(ALIGN1_KERNEL)
    align2 = half & kernel.str.contains(ALIGN2_KERNEL)
    return (pl.when(align1.fill_null(False)).then(float(p["fallback_gain_pct"]))
            .when(align2.fill_null(False)).then(float(p["align2_gain_pct"]))
            .otherwise(float(p["expected_gain_pct"])) / 100.0)


def _unaligned_by_kernel_name(views, kernels: pl.DataFrame, total: int,
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
    if not _matters(views, impact, p):
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
            "top_shape": "shapes not recorded, an unaligned-operand kernel",
            "top_op": groups["name"][0],
        },
        evidence=evidence,
    )


def gemm_shapes(views) -> pl.DataFrame:
    """Leaf GEMM operators with their M, N, K (and batch) from the recorded input shapes."""
    ops = views.cpu.filter(
        pl.col("kind") == "op", pl.col("name").is_in(list(GEMM_OPS)),
        pl.col("input_dims").is_not_null(),
    )
    if ops.height == 0:
        return ops.with_columns(*(pl.lit(None, pl.Int64).alias(c) for c in ("m", "n", "k")))
    first = pl.col("name").replace_strict({k: v[0] for k, v in GEMM_OPS.items()}, return_dtype=pl.Int64)
    second = pl.col("name").replace_strict({k: v[1] for k, v in GEMM_OPS.items()}, return_dtype=pl.Int64)
    # Parse each distinct shape text once: a training loop repeats the same few shapes.
    decoded = ops.select("input_dims").unique().with_columns(
        _dims=pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64)))
    )
    return (
        ops.join(decoded, on="input_dims", how="left")
        .with_columns(_a=first, _b=second)
        .with_columns(
            _ma=pl.col("_dims").list.get(pl.col("_a"), null_on_oob=True),
            _mb=pl.col("_dims").list.get(pl.col("_b"), null_on_oob=True),
        )
        .filter(pl.col("_ma").list.len() >= 2, pl.col("_mb").list.len() >= 2)
        .with_columns(
            m=pl.col("_ma").list.get(-2),
            k=pl.col("_ma").list.get(-1),
            n=pl.col("_mb").list.get(-1),
        )
        .drop("_dims", "_a", "_b", "_ma", "_mb")
    )


def _shapes_by_time(gemms: pl.DataFrame, keys: list[str], detail: str) -> pl.DataFrame:
    """The GEMM calls (from :func:`_with_gpu_time`) grouped by ``keys`` (a shape among them):
    calls, kernel time, and the first kernel, stream and ``detail``; most kernel time first."""
    return gemms.group_by(keys).agg(
        pl.len().alias("calls"), pl.col("gpu_ns").sum(), pl.col("kernel").first(),
        pl.col("stream").first(), pl.col(detail).first(),
    ).sort(["gpu_ns", "shape"], descending=[True, False])


def _with_gpu_time(ops: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Operators with the time of the kernels they launched (gpu_ns), the first kernel's name and
    stream; operators that launched none are dropped."""
    gpu = kernels.filter(pl.col("external_id").is_not_null()).group_by("rank", "external_id").agg(
        gpu_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
        stream=pl.col("stream").first(),
        kernel=pl.col("name").first(),
    )
    return ops.join(gpu, on=["rank", "external_id"], how="inner")


@detector(
    "odd_matmul_shape",
    params=("min_dim_count", "large_dim_count", "min_gpu_time_pct", "expected_gain_pct",
            "fallback_gain_pct", "align2_gain_pct", "min_impact_pct"),
    fields=("odd_ms", "odd_pct", "gemm_count", "shape_count", "top_shape", "top_op"),
)
def odd_matmul_shape(views, p: Params) -> Detection | None:
    """GEMMs whose M, N or K is not a multiple of 8, or whose N or K (the model's dimensions) is
    at least ``large_dim_count`` and not a multiple of 64, from recorded shapes; fires when they
    take ``min_gpu_time_pct`` of kernel time and the saving is ``min_impact_pct`` of the window."""
    kernels = own_rank(views, views.launches).filter(pl.col("kind") == "kernel")
    total = int((kernels["end_ns"] - kernels["start_ns"]).sum() or 0)
    if views.cpu["input_dims"].null_count() == views.cpu.height:
        return _unaligned_by_kernel_name(views, kernels, total, p)
    shapes = own_rank(views, gemm_shapes(views))
    if shapes.height == 0:
        return None
    shapes = _with_gpu_time(shapes, kernels)

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
    if not _matters(views, impact, p):
        return None
    groups = _shapes_by_time(bad, ["name", "shape", "odd_dims"], "input_types")
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
            "top_shape": groups["shape"][0],
            "top_op": groups["name"][0],
        },
        evidence=evidence,
    )


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
    "small_batch_matmul",
    params=("max_row_count", "min_weight_count", "min_kernel_us", "target_row_count",
            "min_gpu_time_pct", "min_impact_pct"),
    fields=("gemm_count", "gemm_ms", "gemm_pct", "rows", "top_shape", "top_op", "intensity",
            "target_row_count"),
)
def small_batch_matmul(views, p: Params) -> Detection | None:
    """Matrix multiplies of a weight with at most ``max_row_count`` rows of activations (from
    recorded shapes, else from cuBLAS's kernel names): memory-bound by the weight's read. The
    impact is the GEMM time that ``target_row_count`` rows per call would save per row; fires
    when the GEMMs take ``min_gpu_time_pct`` of kernel time and the saving is ``min_impact_pct``
    of the window."""
    kernels = own_rank(views, views.launches).filter(pl.col("kind") == "kernel")
    total = int((kernels["end_ns"] - kernels["start_ns"]).sum() or 0)
    if not total:
        return None
    target = p["target_row_count"]
    if views.cpu["input_dims"].null_count() < views.cpu.height:
        shapes = own_rank(views, gemm_shapes(views)).filter(
            pl.col("name").is_in(WEIGHT_GEMM_OPS), pl.col("m") <= p["max_row_count"],
            pl.col("n") * pl.col("k") >= p["min_weight_count"],
        )
        small = _with_gpu_time(shapes, kernels).with_columns(
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
    if not _matters(views, impact, p):
        return None
    groups = _shapes_by_time(small, ["op", "shape", "rows"], "intensity")
    top = groups.row(0, named=True)
    return Detection(
        impact_ns=impact,
        fields={
            "gemm_count": small.height,
            "gemm_ms": ms(small_ns),
            "gemm_pct": pct(small_ns, total),
            "rows": int(small["rows"].max()),
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
