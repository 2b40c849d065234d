"""memory-bound-below-bandwidth: memory-bound operators far below the GPU's HBM bandwidth."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.perfmodel.formulas import FLOP_CLASSES
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    analyzed_device,
    kernels_of,
    ms,
    pct,
    window_length,
)
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
    kernel); fired when it is at least ``min_impact_pct`` of the window. Without shapes
    (Nsight Systems, or torch.profiler without ``record_shapes``), PyTorch's strided
    elementwise kernels are judged from their launch grid (:func:`strided_elementwise`)."""
    if views.cpu["input_dims"].null_count() == views.cpu.height:
        return strided_elementwise(views, p)
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
    return _detection(
        slow,
        lost,
        (pl.col("name"), pl.col("input_dims"), pl.col("op_class")),
        (),
        lost_col="reachable_lost_ns",
        reachable_gbps=float(top["reachable_gbps"]),
        datasheet_gbps=float(top["bandwidth_gbps"]),
    )


def _detection(
    slow: pl.DataFrame,
    lost: int,
    op_shape_class: tuple[pl.Expr, pl.Expr, pl.Expr],
    extra: tuple[str, ...],
    *,
    lost_col: str = "lost_ns",
    reachable_gbps: float,
    datasheet_gbps: float,
) -> Detection:
    """The finding of either path, from its slow rows (the costliest first, ``lost_col`` each)."""
    op, shape, op_class = op_shape_class
    evidence = slow.select(
        op.alias("op"),
        shape.alias("shape"),
        op_class.alias("op_class"),
        "kernels",
        (pl.col("time_ns") / 1e3).alias("total_us"),
        (pl.col("bytes") / 1e6).alias("mbytes"),
        "achieved_gbps",
        pl.col("reachable_pct").alias("bandwidth_pct"),
        "roofline_pct",
        (pl.col(lost_col) / 1e3).alias("lost_us"),
        *extra,
    )
    first = evidence.row(0, named=True)
    return Detection(
        impact_ns=lost,
        fields={
            "op_count": slow.height,
            "lost_ms": ms(lost),
            "slow_ms": ms(int(slow["time_ns"].sum())),
            "top_op": first["op"],
            "top_shape": first["shape"],
            "top_gbps": float(first["achieved_gbps"]),
            "top_bandwidth_pct": float(first["bandwidth_pct"]),
            "bandwidth_gbps": reachable_gbps,
            "datasheet_gbps": datasheet_gbps,
        },
        evidence=evidence,
    )


#: PyTorch's TensorIterator kernel for operands that are not contiguous (strided, transposed,
#: broadcast) or need 64-bit offsets: ``elementwise_kernel<NT, VT, gpu_kernel_impl<F>>``, NT
#: threads a block, each doing VT elements, so the grid holds grid x NT x VT elements
#: (aten/src/ATen/native/cuda/CUDALoops.cuh, ``launch_legacy_kernel``). Contiguous operands get
#: ``vectorized_elementwise_kernel`` instead, which streams near the HBM bandwidth. Nsight
#: Systems and CUPTI in torch.profiler demangle it differently (``(int)128`` or ``128``,
#: ``>>(`` or ``> >(``); both are read.
STRIDED_KERNEL = (
    r"^void at::native::elementwise_kernel<(?:\(int\))?(\d+), (?:\(int\))?(\d+), "
    r"(?:void )?at::native::gpu_kernel_impl(?:_nocast)?<(.*?) ?>\(at::TensorIteratorBase"
)
#: The operator a kernel runs, by its functor: tensors it reads and writes (out included) and
#: where the element type is. Functors not listed are not judged: their operand count is not
#: in the name, and guessing it low would call a fast kernel slow.
FUNCTOR_OPERANDS: tuple[tuple[str, int], ...] = (
    (r"^at::native::CUDAFunctor_add<", 3),  # a + alpha * b, two tensors
    (r"^at::native::BinaryFunctor<", 3),  # mul, div, sub, ... of two tensors
    (r"^at::native::(?:A|B)UnaryFunctor<", 2),  # one tensor with a scalar
    (r"^at::native::direct_copy_kernel_cuda", 2),  # copy_, contiguous(), .t().contiguous()
)
#: Bytes of the element types a functor's name carries (its first one; a copy's, its lambda's).
ELEMENT_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "short": 2, "float": 4, "int": 4, "double": 8,
    "long": 8, "bool": 1, "unsigned char": 1, "signed char": 1, "char": 1,
}  # fmt: skip


def _strided_kernels(views: Views) -> pl.DataFrame:
    """The rank's strided elementwise kernels of a known operator, with the elements their grid
    holds and the bytes those move (each operand read or written once: an upper bound, since
    a partial last block and a broadcast operand move less, so the bandwidth is one too)."""
    kernels = kernels_of(views)
    parts = pl.col("name").str.extract_groups(STRIDED_KERNEL)
    k = kernels.with_columns(_p=parts).filter(pl.col("_p").struct.field("3").is_not_null())
    functor = pl.col("_p").struct.field("3")
    operands = pl.lit(None, pl.Int64)
    for pattern, n in reversed(FUNCTOR_OPERANDS):
        operands = (
            pl.when(functor.str.contains(pattern)).then(pl.lit(n, pl.Int64)).otherwise(operands)
        )
    types = "|".join(t.replace(" ", r"\s") for t in sorted(ELEMENT_BYTES, key=len, reverse=True))
    # The first type among the functor's template arguments, or the copy lambda's argument.
    dtype = pl.coalesce(
        functor.str.extract(r"lambda\((" + types + r")\)"),
        functor.str.extract(r"<(" + types + r")[,>]"),
    )
    k = k.with_columns(
        functor=functor.str.extract(r"^at::native::(\w+)"),
        operands=operands,
        dtype=dtype,
        elements=pl.col("grid_x").cast(pl.Int64)
        * pl.col("grid_y").cast(pl.Int64).fill_null(1)
        * pl.col("grid_z").cast(pl.Int64).fill_null(1)
        * pl.col("_p").struct.field("1").cast(pl.Int64)
        * pl.col("_p").struct.field("2").cast(pl.Int64),
    ).filter(pl.col("operands").is_not_null(), pl.col("dtype").is_not_null())
    return k.with_columns(
        bytes=pl.col("elements")
        * pl.col("operands")
        * pl.col("dtype").replace_strict(ELEMENT_BYTES, return_dtype=pl.Int64)
    )


def strided_elementwise(views: Views, p: Params) -> Detection | None:
    """The rule without shapes: PyTorch's strided elementwise kernels (:data:`STRIDED_KERNEL`)
    of a known operator (:data:`FUNCTOR_OPERANDS`), their bytes from the launch grid, judged
    as the shapes' path judges operators, one kernel name and grid a row. Norms, softmax and
    reductions are not seen here: their kernels' names do not give their bytes."""
    from traceanalyzer.devices import peaks_of

    peaks = peaks_of(analyzed_device(views))
    if peaks is None:
        raise NotApplicable(
            "no memory bandwidth is known for this GPU (it is not in the device table)")
    k = _strided_kernels(views)
    if k.is_empty() and not kernels_of(views)["name"].str.contains("at::native::").any():
        raise NotApplicable(
            "operator shapes were not recorded (profile with record_shapes=True), and no "
            "PyTorch kernel was recorded to judge by its launch grid"
        )
    reachable = peaks.reachable_gbps
    keys = ["name", "grid_x", "grid_y", "grid_z", "block_x"]
    groups = (
        k.group_by(keys)
        .agg(
            pl.col("functor").first(),
            pl.col("dtype").first(),
            pl.col("elements").first(),
            kernels=pl.len(),
            time_ns=pl.col("dur").sum(),
            bytes=pl.col("bytes").sum(),
        )
        .with_columns(achieved_gbps=pl.col("bytes") / pl.col("time_ns"))
        .with_columns(
            reachable_pct=100.0 * pl.col("achieved_gbps") / reachable,
            roofline_pct=100.0 * pl.col("achieved_gbps") / peaks.hbm_gbps,
            lost_ns=(pl.col("time_ns") - pl.col("bytes") / reachable).clip(lower_bound=0.0),
        )
    )
    slow = groups.filter(
        pl.col("reachable_pct") < p["max_bandwidth_pct"],
        pl.col("time_ns") >= p["min_kernel_us"] * 1e3 * pl.col("kernels"),
    ).sort(["lost_ns", "name"], descending=[True, False])
    window = window_length(views)
    lost = int(slow["lost_ns"].sum() or 0)
    if slow.is_empty() or not window or pct(lost, window) < p["min_impact_pct"]:
        return None
    return _detection(
        slow.with_columns(pl.col("name").alias("kernel")),
        lost,
        (
            pl.format("{}<{}> (strided elementwise kernel)", "functor", "dtype"),
            pl.format("{} elements (from its grid)", "elements"),
            pl.lit("elementwise"),
        ),
        ("kernel", "grid_x", "block_x"),
        reachable_gbps=float(reachable),
        datasheet_gbps=float(peaks.hbm_gbps),
    )
