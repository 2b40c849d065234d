"""The performance model of one trace: FLOPs and bytes per operator and per kernel, the roofline,
model FLOPs per step (docs/perf-model.md).

Each kernel is attributed to one operator call: to the model-FLOP operator (matmul, attention,
convolution; formulas.FLOP_OPS) whose time range on the launching thread holds the kernel's
launch call, else to the innermost operator that launched it (Kineto's External id). An
operator call's FLOPs and bytes are split over its kernels in proportion to their durations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.devices import Peaks
from traceanalyzer.model import COLLECT_ENGINE, DType
from traceanalyzer.perfmodel.formulas import (
    FLOP_CLASSES,
    FLOP_OPS,
    IS_CAUSAL_AT,
    SIGNATURE,
    is_causal,
    kernel_precision,
    signature_costs,
)

#: One row per kernel instance that the model attributes (analysis frame "perf_kernels").
KERNEL_COLUMNS: dict[str, DType] = {
    "name": pl.String,
    "op_name": pl.String,
    "input_dims": pl.String,
    "input_types": pl.String,
    "op_class": pl.String,
    "precision": pl.String,
    "step": pl.Int64,
    #: Where and when it ran: what tells one kernel from another (the what-if's join).
    "device": pl.Int32,
    "stream": pl.Int64,
    "start_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "flops": pl.Float64,
    #: The FLOPs the kernel executes: ``flops`` but for causal attention, whose kernels skip
    #: the masked part of the square (``flops`` counts it, as FlopCounterMode and MFU do).
    "executed_flops": pl.Float64,
    "bytes": pl.Float64,
}


def call_extras(ops: pl.DataFrame) -> pl.DataFrame:
    """Per operator call (rank, external_id): ``causal`` (fused attention's is_causal from its
    Concrete Inputs, else null) and ``trace_flops`` (Kineto's ``flops`` argument, with_flops=True;
    null where absent or 0). Decoded once per distinct (name, Concrete Inputs), not per call."""
    has = set(ops.columns)
    concrete = pl.col("concrete_inputs") if "concrete_inputs" in has else pl.lit(None, pl.String)
    trace = pl.col("flops") if "flops" in has else pl.lit(None, pl.Int64)
    calls = ops.select(
        "rank",
        "external_id",
        "name",
        _concrete=concrete,
        trace_flops=pl.when(trace > 0).then(trace.cast(pl.Float64)),
    )
    pairs = (
        calls.filter(pl.col("name").is_in(list(IS_CAUSAL_AT)), pl.col("_concrete").is_not_null())
        .select("name", "_concrete")
        .unique()
    )
    pairs = pairs.with_columns(causal=is_causal(pl.col("name"), pl.col("_concrete")))
    return calls.join(pairs, on=["name", "_concrete"], how="left", nulls_equal=False).select(
        "rank", "external_id", "causal", "trace_flops"
    )


def attributed_kernels(launches: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """Kernels of ``launches`` (one rank's) with the operator call they belong to and their share
    of its FLOPs and bytes (:data:`KERNEL_COLUMNS`)."""
    # Lazy, so that the filters copy only the columns selected (not the stacks and names).
    kernels = launches.lazy().filter(pl.col("kind") == "kernel").select(
        "rank",
        "name",
        "device",
        "stream",
        "start_ns",
        "end_ns",
        "external_id",
        "launch_start_ns",
        "launch_tid",
        "step",
        dur_ns=pl.col("end_ns") - pl.col("start_ns"),
    ).collect(engine=COLLECT_ENGINE)
    extra = [c for c in ("concrete_inputs", "flops") if c in cpu.columns]
    # The operators' numbers only (and their row in ``cpu``): their texts (name, shapes, types,
    # a few hundred bytes a call) are gathered below for the calls that launched a kernel, not
    # sorted and deduplicated with every operator of the trace.
    ops = cpu.lazy().with_row_index("_row").filter(pl.col("kind") == "op").select(
        "_row", "rank", "tid", "external_id", "start_ns", "end_ns",
        _flop=pl.col("name").is_in(list(FLOP_OPS)), _dims=pl.col("input_dims").is_not_null(),
    ).collect(engine=COLLECT_ENGINE)
    if kernels.is_empty() or ops.is_empty() or not ops["_dims"].any():
        return pl.DataFrame(schema=KERNEL_COLUMNS)
    flop_ops = (
        ops.filter(pl.col("_flop"))
        .sort("start_ns")
        .select(
            "rank",
            pl.col("tid").alias("launch_tid"),
            _op_start="start_ns",
            _op_end="end_ns",
            _flop_id="external_id",
        )
    )
    launched = kernels.filter(pl.col("launch_start_ns").is_not_null()).sort("launch_start_ns")
    if not flop_ops.is_empty():
        # Model-FLOP operators do not nest in one another: the last one to start on the
        # launching thread before the launch call holds it, if it has not ended yet.
        launched = launched.join_asof(
            flop_ops,
            left_on="launch_start_ns",
            right_on="_op_start",
            by=["rank", "launch_tid"],
            strategy="backward",
            check_sortedness=False,
        ).with_columns(
            _flop_id=pl.when(pl.col("launch_start_ns") < pl.col("_op_end")).then("_flop_id")
        )
    else:
        launched = launched.with_columns(_flop_id=pl.lit(None, pl.Int64))
    launched = launched.with_columns(op_id=pl.coalesce("_flop_id", "external_id")).filter(
        pl.col("op_id").is_not_null()
    )
    # One operator call per External id: a trace whose operators share ids (a hostile one, all
    # at 1) made the join below a product, every kernel once per operator (400k kernels ran for
    # minutes and tens of GB), and multiplied their FLOPs. As the CPU frame's parent_op
    # (ingest/kineto/assemble.py), the operator that starts last is the one taken. Only the ids
    # that kernels belong to are sorted (a trace holds several times more operators than the
    # ones that launch a kernel; the semi join keeps every row of an id, so the same one wins),
    # and only their calls' signatures (three texts) are hashed.
    rows = ops.join(launched.select("rank", external_id="op_id").unique(),
                    on=["rank", "external_id"], how="semi").sort(
        "start_ns", maintain_order=True
    ).unique(["rank", "external_id"], keep="last", maintain_order=True)["_row"]
    ops = cpu.select(pl.col("rank", "external_id", *SIGNATURE, *extra).gather(rows))
    costs = signature_costs(ops.select(SIGNATURE).unique())
    calls = (
        ops.select("rank", "external_id", *SIGNATURE)
        .join(call_extras(ops), on=["rank", "external_id"], how="left")
        .rename({"external_id": "op_id"})
        .join(costs, on=list(SIGNATURE), how="left", nulls_equal=True)
        .with_columns(
            # Where the shapes gave nothing (not decodable), the trace's own count stands in.
            flops=pl.when(pl.col("flops").is_null() & pl.col("name").is_in(list(FLOP_OPS)))
            .then(pl.col("trace_flops"))
            .otherwise(pl.col("flops"))
        )
        .with_columns(
            executed_flops=pl.when(pl.col("causal").fill_null(False))
            .then(pl.col("flops") * pl.col("causal_fraction").fill_null(1.0))
            .otherwise(pl.col("flops"))
        )
    )
    out = (
        launched.join(calls, on=["rank", "op_id"], how="inner")
        .with_columns(
            _share=pl.col("dur_ns")
            / pl.col("dur_ns").sum().over("rank", "op_id").clip(lower_bound=1),
        )
        .with_columns(
            flops=pl.col("flops") * pl.col("_share"),
            executed_flops=pl.col("executed_flops") * pl.col("_share"),
            bytes=pl.col("bytes") * pl.col("_share"),
            precision=kernel_precision(pl.col("precision"), pl.col("name")),
        )
    )
    return out.select(
        pl.col("name"),
        pl.col("name_right").alias("op_name"),
        *[c for c in KERNEL_COLUMNS if c not in ("name", "op_name")],
    ).cast(KERNEL_COLUMNS)  # type: ignore[arg-type]  # Polars: a dict of dtypes is accepted


def flops_per_step(kernels: pl.DataFrame) -> tuple[float | None, dict[str, float]]:
    """Model FLOPs (classes gemm, attention, conv) per step: the median over the steps, and each
    operator's (by name) mean per step. (None, {}) when the trace has no steps or no shapes."""
    model = kernels.filter(
        pl.col("op_class").is_in(list(FLOP_CLASSES)),
        pl.col("step").is_not_null(),
        pl.col("flops").is_not_null(),
    )
    if model.is_empty():
        return None, {}
    per_step = model.group_by("step").agg(pl.col("flops").sum())
    steps = per_step.height
    by_op = model.group_by("op_name").agg(pl.col("flops").sum() / steps)
    return (
        float(per_step["flops"].median()),  # type: ignore[arg-type]
        dict(zip(by_op["op_name"], by_op["flops"], strict=True)),
    )


#: Kineto's ``flops`` argument (with_flops=True) is set on these operators only (torch's
#: profiler/util.cpp, computeFlops): the matrix multiplies, 2mnk (times the batch), as ours;
#: aten::conv2d, 2 N Hout Wout kh kw Cin Cout / groups, which we count on the aten::convolution
#: it calls; aten::mul and aten::add, the elements of input 0, as our elementwise count.
TRACE_FLOP_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv2d")
#: ...of which these are model FLOPs (the headline ratio); aten::mul and aten::add are not.
_COMPOSITE = {"aten::conv2d": "aten::convolution"}


def trace_flops_check(cpu: pl.DataFrame) -> dict[str, Any] | None:
    """Our FLOPs against Kineto's ``flops`` argument, over the calls that carry it: per operator
    name ``{calls, trace_flops, flops, ratio}`` (ratio = ours / the trace's), and over the model
    -FLOP operators (:data:`TRACE_FLOP_OPS`) ``calls`` and ``ratio``. A composite (aten::conv2d)
    is compared with the operator it calls (the aten::convolution that starts first within it,
    on its thread). None when no call carries the argument."""
    if "flops" not in cpu.columns:
        return None
    # Lazy, so that each filter copies its few rows of the columns selected, not every operator.
    ops = cpu.lazy().filter(pl.col("kind") == "op")
    counted = ops.filter(pl.col("flops") > 0).select(
        "rank",
        "tid",
        "start_ns",
        "end_ns",
        *SIGNATURE,
        trace_flops=pl.col("flops").cast(pl.Float64),
    ).collect(engine=COLLECT_ENGINE)
    if counted.is_empty():
        return None
    composite = counted.filter(pl.col("name").is_in(list(_COMPOSITE)))
    direct = counted.filter(~pl.col("name").is_in(list(_COMPOSITE))).select(
        "name", "trace_flops", *[pl.col(c).alias(f"_{c}") for c in SIGNATURE]
    )
    if not composite.is_empty():
        inner = (
            ops.filter(pl.col("name").is_in(list(_COMPOSITE.values())))
            .select(
                "rank",
                "tid",
                *[pl.col(c).alias(f"_{c}") for c in SIGNATURE],
                _start="start_ns",
                _end="end_ns",
            )
            .sort("_start")
            .collect(engine=COLLECT_ENGINE)
        )
        nested = (
            composite.sort("start_ns")
            .join_asof(
                inner,
                left_on="start_ns",
                right_on="_start",
                by=["rank", "tid"],
                strategy="forward",
                check_sortedness=False,
            )
            .filter(pl.col("_end") <= pl.col("end_ns"))
            .select("name", "trace_flops", *[f"_{c}" for c in SIGNATURE])
        )
        direct = pl.concat([direct, nested], how="vertical_relaxed")
    sigs = direct.select([pl.col(f"_{c}").alias(c) for c in SIGNATURE]).unique()
    costs = signature_costs(sigs).select(
        *[pl.col(c).alias(f"_{c}") for c in SIGNATURE], ours=pl.col("flops")
    )
    compared = direct.join(
        costs, on=[f"_{c}" for c in SIGNATURE], how="left", nulls_equal=True
    ).filter(pl.col("ours").is_not_null())
    if compared.is_empty():
        return None
    by_op = (
        compared.group_by("name")
        .agg(
            calls=pl.len(),
            trace_flops=pl.col("trace_flops").sum(),
            flops=pl.col("ours").sum(),
        )
        .with_columns(ratio=pl.col("flops") / pl.col("trace_flops"))
        .sort("name")
    )
    model = by_op.filter(pl.col("name").is_in(list(TRACE_FLOP_OPS)))
    total_trace = float(model["trace_flops"].sum()) if model.height else 0.0
    return {
        "calls": int(model["calls"].sum()) if model.height else 0,
        "ratio": float(model["flops"].sum()) / total_trace if total_trace else None,
        "by_op": {
            r["name"]: {k: r[k] for k in ("calls", "trace_flops", "flops", "ratio")}
            for r in by_op.to_dicts()
        },
    }


@dataclass
class PerfOptions:
    """What the user says about the run: peak overrides (TFLOP/s, GB/s), tokens per step and,
    for traces without shapes, the model FLOPs per step."""

    peak_tflops: float | None = None
    peak_bandwidth_gbps: float | None = None
    tokens_per_step: int | None = None
    flops_per_step: float | None = None


@dataclass
class Roofline:
    """The machine the roofline is drawn for: compute peaks by precision and the bandwidth."""

    device: str | None  # the device name in the trace
    peaks: Peaks | None  # the table's entry, None when unknown
    options: PerfOptions = field(default_factory=PerfOptions)

    def compute_tflops(self, precision: str | None) -> float | None:
        """The compute roof for ``precision`` (bf16, fp8, tf32, fp32; None means bf16)."""
        if self.options.peak_tflops is not None:
            return self.options.peak_tflops
        if self.peaks is None:
            return None
        value = getattr(self.peaks, precision or "bf16", None)
        return float(value) if value is not None else self.peaks.bf16

    @property
    def bandwidth_gbps(self) -> float | None:
        if self.options.peak_bandwidth_gbps is not None:
            return self.options.peak_bandwidth_gbps
        return self.peaks.hbm_gbps if self.peaks is not None else None

    @property
    def reachable_gbps(self) -> float | None:
        """The bandwidth a streaming kernel reaches (devices.Peaks.reachable_gbps), or the user's
        ``--peak-bandwidth``, taken as a measured figure."""
        if self.options.peak_bandwidth_gbps is not None:
            return self.options.peak_bandwidth_gbps
        return self.peaks.reachable_gbps if self.peaks is not None else None

    @property
    def peak_label(self) -> str | None:
        """Which peak MFU is against, in words."""
        if self.options.peak_tflops is not None:
            return "--peak-tflops"
        if self.peaks is None:
            return None
        return f"{self.peaks.name} dense {self.peaks.matrix}"

    def ridge(self, precision: str | None = None) -> float | None:
        """The ridge point, FLOP per byte: compute roof / bandwidth."""
        roof, bw = self.compute_tflops(precision), self.bandwidth_gbps
        return roof * 1e12 / (bw * 1e9) if roof and bw else None


_EXECUTED = "executed_flops"


def roofline_table(
    kernels: pl.DataFrame, roof: Roofline, by: tuple[str, ...], steps: int | None = None
) -> pl.DataFrame:
    """Per group (``by``: an operator signature, or a kernel name): calls, time, FLOPs and bytes,
    intensity (FLOP/B), achieved TFLOP/s and GB/s, the roof at that intensity, the bound, % of
    roofline and ``lost_ns``: the time beyond what a kernel running at the roof would take;
    ``reachable_pct`` and ``reachable_lost_ns``, the same for the bytes alone against the
    reachable bandwidth. Per step when ``steps`` is given (the sums divided by it)."""
    frame = kernels.filter(pl.col("bytes") > 0)
    divisor = float(steps) if steps else 1.0
    agg = frame.group_by(*by, "precision").agg(
        op_class=pl.col("op_class").first(),
        kernels=(pl.col("kernels").sum() if "kernels" in frame.columns else pl.len()).cast(
            pl.Int64
        ),
        time_ns=pl.col("dur_ns").sum() / divisor,
        model_flops=pl.col("flops").sum() / divisor,
        # The roofline is of the work the kernels do: causal attention's half, not the square.
        flops=pl.col(_EXECUTED if _EXECUTED in frame.columns else "flops").sum() / divisor,
        bytes=pl.col("bytes").sum() / divisor,
    )
    prec = agg["precision"].to_list()
    roofs = [roof.compute_tflops(p) for p in prec]
    bw = roof.bandwidth_gbps
    agg = agg.with_columns(
        compute_roof_tflops=pl.Series(roofs, dtype=pl.Float64),
        bandwidth_gbps=pl.lit(bw, pl.Float64),
        reachable_gbps=pl.lit(roof.reachable_gbps, pl.Float64),
    )
    seconds = pl.col("time_ns") / 1e9
    intensity = pl.col("flops") / pl.col("bytes")
    attainable = pl.min_horizontal(
        pl.col("compute_roof_tflops"), intensity * pl.col("bandwidth_gbps") / 1e3
    )
    best_s = pl.max_horizontal(
        pl.col("flops") / (pl.col("compute_roof_tflops") * 1e12),
        pl.col("bytes") / (pl.col("bandwidth_gbps") * 1e9),
    )
    return (
        agg.with_columns(
            intensity=intensity,
            achieved_tflops=pl.col("flops") / seconds / 1e12,
            achieved_gbps=pl.col("bytes") / seconds / 1e9,
            roof_tflops=attainable,
            bound=pl.when(
                intensity.is_null()
                | pl.col("compute_roof_tflops").is_null()
                | pl.col("bandwidth_gbps").is_null()
            )
            .then(pl.lit(None, pl.String))
            .when(intensity >= pl.col("compute_roof_tflops") * 1e3 / pl.col("bandwidth_gbps"))
            .then(pl.lit("compute"))
            .otherwise(pl.lit("memory")),
        )
        .with_columns(
            # The time at the roof over the time taken: achieved / attainable FLOP/s, and for an
            # operator without FLOPs (a copy) achieved / peak bandwidth.
            roofline_pct=100.0 * best_s / seconds,
            lost_ns=(pl.col("time_ns") - best_s * 1e9).clip(lower_bound=0.0),
            # Against the bandwidth a streaming kernel reaches, not the datasheet's: what the
            # memory-bound rule judges (docs/perf-model.md).
            reachable_pct=100.0 * pl.col("bytes") / (pl.col("reachable_gbps") * 1e9) / seconds,
            reachable_lost_ns=(pl.col("time_ns") - pl.col("bytes") / pl.col("reachable_gbps")).clip(
                lower_bound=0.0
            ),
        )
        .sort(["lost_ns", *by], descending=[True, *[False] * len(by)], nulls_last=True)
    )


def perf_metrics(
    flops: float | None, flops_source: str | None, step_ns: float | None, roof: Roofline
) -> dict[str, Any]:
    """The JSON metrics of the model (docs/metrics.md): flops_per_step, achieved_tflops,
    mfu_pct, peak_tflops, peak_name, tokens_per_s, and the reasons for what is null."""
    opts = roof.options
    if opts.flops_per_step is not None:
        flops, flops_source = opts.flops_per_step, "--flops-per-step"
    out: dict[str, Any] = {
        "flops_per_step": flops,
        "flops_source": flops_source,
        "achieved_tflops": None,
        "mfu_pct": None,
        "peak_tflops": roof.compute_tflops("bf16"),
        "peak_name": roof.peak_label,
        "tokens_per_s": None,
        "mfu_reason": None,
    }
    step_s = step_ns / 1e9 if step_ns else None
    if flops is None:
        out["mfu_reason"] = (
            "no model FLOPs: the trace records no operator shapes (profile with "
            "record_shapes=True, or give --flops-per-step)"
        )
    elif step_s is None:
        out["mfu_reason"] = "no steps found, so no step time"
    else:
        out["achieved_tflops"] = flops / step_s / 1e12
        peak = out["peak_tflops"]
        if peak:
            out["mfu_pct"] = 100.0 * out["achieved_tflops"] / peak
        else:
            out["mfu_reason"] = (
                f"no peak known for {roof.device or 'an unrecorded GPU'} (give --peak-tflops)"
            )
    if opts.tokens_per_step is not None and step_s:
        out["tokens_per_s"] = opts.tokens_per_step / step_s
    return out
