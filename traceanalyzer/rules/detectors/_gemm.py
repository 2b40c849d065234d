"""Matrix multiplies, shared by fp32-matmul, odd-matmul-shape and small-batch-matmul: GEMM
kernels and operators, their shapes and kernel time, and when a saving is worth a finding."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Params
from traceanalyzer.rules.detectors._common import pct, window_length

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: Kernel names that say the GEMM runs in 16-bit or 8-bit precision (checked first).
#: cuBLAS's nvjet kernels name their types after the architecture: nvjet_sm90_tst_... (a letter
#: per operand: h = FP16, t = BF16, e/q = FP8, s = FP32). Its GEMV kernels name their template
#: types in full (gemv2T_kernel_val<int, int, __nv_bfloat16, ...>, ... __half ...).
HALF_KERNEL = r"(?i)bf16|bfloat16|f16|fp16|half|hgemm|h1688|h16816|h884|e4m3|e5m2|fp8|imma|int8|nvjet_(sm\d+_)?[htqeb]"
#: GEMM kernels the shared categories may not know yet (cuBLAS's nvjet kernels on Hopper).
EXTRA_GEMM = r"(?i)^nvjet"
#: Leaf GEMM operators (they launch the kernels; aten::linear/matmul call into them) and the
#: positions of their two matrix inputs.
GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1),
            "aten::baddbmm": (1, 2), "aten::addbmm": (1, 2), "aten::_scaled_mm": (0, 1)}


def saving_matters(views: Views, impact_ns: int, p: Params) -> bool:
    """Whether a GEMM saving is worth a finding: a share of kernel time alone is not, when the
    GPU mostly idles (two FP32 GEMMs of 30 µs in a 9 ms window are 27% of its kernel time)."""
    window = window_length(views)
    return bool(window) and pct(impact_ns, window) >= p["min_impact_pct"]


def gemm_shapes(views: Views) -> pl.DataFrame:
    """Leaf GEMM operators (rank, name, external_id, input_dims, input_types) with their M, N,
    K from the recorded input shapes. Only those columns are taken: a decode loop's GEMM calls
    with all their columns (stacks, concrete inputs) were this rule's largest copy."""
    ops = views.cpu.select("rank", "kind", "name", "external_id", "input_dims",
                           "input_types").filter(
        pl.col("kind") == "op", pl.col("name").is_in(list(GEMM_OPS)),
        pl.col("input_dims").is_not_null(),
    ).drop("kind")
    if ops.height == 0:
        return ops.with_columns(*(pl.lit(None, pl.Int64).alias(c) for c in ("m", "n", "k")))
    first = pl.col("name").replace_strict({k: v[0] for k, v in GEMM_OPS.items()}, return_dtype=pl.Int64)
    second = pl.col("name").replace_strict({k: v[1] for k, v in GEMM_OPS.items()}, return_dtype=pl.Int64)
    # M, N and K of each distinct operator and shape text, parsed once (a training loop repeats
    # the same few shapes), then joined to the calls as numbers: the parsed lists per call were
    # this rule's largest allocation.
    sizes = (
        ops.select("name", "input_dims").unique()
        .with_columns(_dims=pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))))
        .with_columns(
            _ma=pl.col("_dims").list.get(first, null_on_oob=True),
            _mb=pl.col("_dims").list.get(second, null_on_oob=True),
        )
        .filter(pl.col("_ma").list.len() >= 2, pl.col("_mb").list.len() >= 2)
        .select(
            "name", "input_dims",
            m=pl.col("_ma").list.get(-2),
            k=pl.col("_ma").list.get(-1),
            n=pl.col("_mb").list.get(-1),
        )
    )
    return ops.join(sizes, on=["name", "input_dims"], how="inner", maintain_order="left")


def shapes_by_time(gemms: pl.DataFrame, keys: list[str], detail: str) -> pl.DataFrame:
    """The GEMM calls (from :func:`with_gpu_time`) grouped by ``keys`` (a shape among them):
    calls, kernel time, and the first kernel (unless ``keys`` name it), stream and ``detail``;
    most kernel time first."""
    first = [c for c in ("kernel", "stream", detail) if c not in keys]
    return gemms.group_by(keys).agg(
        pl.len().alias("calls"), pl.col("gpu_ns").sum(), *(pl.col(c).first() for c in first),
    ).sort(["gpu_ns", "shape"], descending=[True, False])


def with_gpu_time(ops: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Operators with the time of the kernels they launched (gpu_ns), the first kernel's name and
    stream; operators that launched none are dropped."""
    gpu = kernels.filter(pl.col("external_id").is_not_null()).group_by("rank", "external_id").agg(
        gpu_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
        stream=pl.col("stream").first(),
        kernel=pl.col("name").first(),
    )
    return ops.join(gpu, on=["rank", "external_id"], how="inner")
