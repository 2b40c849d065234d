"""The performance model: FLOPs and bytes per operator and kernel, the roofline, MFU
(docs/perf-model.md).

The analysis stores what does not depend on the GPU's peaks (:func:`summarize`: the kernels'
FLOPs, bytes and time per operator signature and kernel name, and the model FLOPs per step);
the reports draw the roofline from it with the peaks of the device, or the user's
(:class:`PerfOptions`), so ``--peak-tflops`` needs no new analysis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.devices import peaks_of
from traceanalyzer.model import DType, shapes_hint
from traceanalyzer.perfmodel.model import (
    PerfOptions,
    Roofline,
    flops_per_step,
    perf_metrics,
    roofline_table,
    trace_flops_check,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.result import AnalysisResult
    from traceanalyzer.analysis.views import Views
    from traceanalyzer.model import Device

__all__ = [
    "PerfOptions",
    "Roofline",
    "device_roofline",
    "kernel_roofline",
    "metrics_of",
    "op_roofline",
    "roofline_of",
    "summarize",
]

#: The stored frame (AnalysisResult.perf): one row per (operator signature, kernel name).
PERF_SCHEMA: dict[str, DType] = {
    "op_name": pl.String,
    "input_dims": pl.String,
    "input_types": pl.String,
    "name": pl.String,
    "op_class": pl.String,
    "precision": pl.String,
    "kernels": pl.Int64,
    "dur_ns": pl.Int64,
    "flops": pl.Float64,
    "executed_flops": pl.Float64,
    "bytes": pl.Float64,
}


def summarize(views: Views, rank: int) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The model of ``rank``: the per (signature, kernel) frame and the summary (model FLOPs per
    step, the model FLOPs of each operator per step, how they were found)."""
    from traceanalyzer.analysis.views import of_rank

    cpu = of_rank(views.cpu, rank)
    kernels = views.attributed_kernels(rank)
    flops, by_op = flops_per_step(kernels)
    frame = (
        kernels.group_by("op_name", "input_dims", "input_types", "name")
        .agg(
            op_class=pl.col("op_class").first(),
            precision=pl.col("precision").first(),
            kernels=pl.len().cast(pl.Int64),
            dur_ns=pl.col("dur_ns").sum(),
            flops=pl.when(pl.col("flops").is_not_null().any()).then(pl.col("flops").sum()),
            executed_flops=pl.when(pl.col("executed_flops").is_not_null().any()).then(
                pl.col("executed_flops").sum()
            ),
            bytes=pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
        )
        .select(list(PERF_SCHEMA))
        .cast(PERF_SCHEMA)  # type: ignore[arg-type]  # Polars: a dict of dtypes is accepted
        .sort("dur_ns", "name", descending=[True, False])
    )
    has_shapes = not cpu.is_empty() and cpu["input_dims"].null_count() < cpu.height
    source = "shapes" if flops is not None else None
    reason = None
    if flops is None:
        reason = (
            f"the trace records no operator shapes ({shapes_hint(views.meta.source_format)})"
            if not has_shapes
            else "no steps with model FLOPs"
        )
    return frame, {
        "flops_per_step": flops,
        "flops_by_op": by_op,
        "flops_source": source,
        "reason": reason,
        "trace_flops": trace_flops_check(cpu),
    }


def device_roofline(
    cpu: pl.DataFrame, frame: pl.DataFrame, device: Device | None
) -> tuple[pl.DataFrame | None, str | None]:
    """The roofline per (operator signature, precision) of ``frame`` (:func:`summarize`'s)
    against ``device``'s datasheet peaks (the user's overrides left out: the rules judge the
    device in the trace), most time lost first; (None, why) without shapes or peaks."""
    if cpu.is_empty() or cpu["input_dims"].null_count() == cpu.height:
        return None, "operator shapes were not recorded (profile with record_shapes=True)"
    peaks = peaks_of(device)
    if peaks is None:
        name = device.name if device is not None and device.name else "an unrecorded GPU"
        return None, f"no peak throughput known for {name}"
    table = roofline_table(
        frame.rename({"name": "kernel"}).rename({"op_name": "name"}),
        Roofline(device.name if device else None, peaks),
        ("name", "input_dims", "input_types"),
    )
    return table, None


def roofline_of(result: AnalysisResult) -> Roofline:
    """The roofline for the headline rank's GPU, with the user's overrides."""
    devices = sorted(result.meta.devices, key=lambda d: d.id)
    device = devices[0] if devices else None
    options = getattr(result, "perf_options", None) or PerfOptions()
    return Roofline(device.name if device else None, peaks_of(device), options)


def metrics_of(result: AnalysisResult) -> dict[str, Any]:
    """The model's entries of the JSON ``metrics`` object (docs/metrics.md)."""
    summary = result.perf_summary or {}
    out = perf_metrics(
        summary.get("flops_per_step"),
        summary.get("flops_source"),
        result.metrics.step_time_p50_ns,
        roofline_of(result),
    )
    gpus = _gpus_used(result)
    if gpus > 1 and out["peak_tflops"]:
        # A process that drives several GPUs (model parallelism in one process) counts the FLOPs
        # of all of them in a step: its peak is theirs together, else MFU passes 100%.
        out["peak_tflops"] = out["peak_tflops"] * gpus
        out["peak_name"] = f"{gpus} x {out['peak_name']}"
        if out["achieved_tflops"] is not None:
            out["mfu_pct"] = 100.0 * out["achieved_tflops"] / out["peak_tflops"]
    check = summary.get("trace_flops") or {}
    out["trace_flops_ratio"] = check.get("ratio")
    out["trace_flops_calls"] = check.get("calls")
    if out["flops_per_step"] is None and summary.get("reason"):
        out["mfu_reason"] = f"no model FLOPs: {summary['reason']}; give --flops-per-step"
    return out


def _gpus_used(result: AnalysisResult) -> int:
    """How many GPUs the headline rank ran work on (its streams' devices), at least 1."""
    streams = getattr(result, "streams", None)
    if streams is None or streams.is_empty() or "device" not in streams.columns:
        return 1
    if "rank" in streams.columns:
        streams = streams.filter(pl.col("rank") == result.metrics.rank)
    return max(1, streams["device"].drop_nulls().n_unique())


def _kernels(result: AnalysisResult) -> pl.DataFrame:
    perf = result.perf
    if perf is None or perf.is_empty():
        return pl.DataFrame(schema={**PERF_SCHEMA, "dur_ns": pl.Int64})
    return perf


def op_roofline(result: AnalysisResult) -> pl.DataFrame:
    """The roofline per operator signature (model.roofline_table), most time lost first."""
    frame = _kernels(result).rename({"name": "kernel"}).rename({"op_name": "name"})
    return roofline_table(
        frame.with_columns(pl.col("dur_ns").cast(pl.Float64)),
        roofline_of(result),
        ("name", "input_dims", "input_types"),
    )


def kernel_roofline(result: AnalysisResult) -> pl.DataFrame:
    """The roofline per kernel name, most time lost first."""
    return roofline_table(
        _kernels(result).with_columns(pl.col("dur_ns").cast(pl.Float64)),
        roofline_of(result),
        ("name",),
    )
