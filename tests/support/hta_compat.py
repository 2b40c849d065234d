"""Recompute HTA's temporal and idle breakdowns from our canonical frames, in HTA's window.

HTA analyses only GPU work launched before the last ``ProfilerStep#N`` starts (when the trace
has two steps or more) and drops GPU work with no launch call in that case; see
docs/hta-parity.md section 1. Our own analysis keeps the whole trace; this module applies HTA's
window so the two can be compared number for number.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis.views import Views
from traceanalyzer.model import Trace


def hta_window(trace: Trace) -> Trace:
    steps = trace.annotations.filter(pl.col("kind") == "step")
    if steps["name"].n_unique() < 2:
        return trace
    # HTA takes the latest start of any event named ProfilerStep#N, and PyTorch 2.x writes each
    # step twice: on the CPU and as a GPU-side annotation (gpu_user_annotation), which starts
    # when the GPU reaches the step. Where the GPU lags the CPU, HTA's last step so starts late
    # and keeps work launched inside the last CPU step (docs/hta-parity.md).
    named = trace.annotations.filter(pl.col("name").is_in(steps["name"].unique().implode()))
    last_start = named["start_ns"].max()
    launches = Views(trace).launches
    keep = launches.filter(pl.col("launch_start_ns") < last_start).select(
        "rank", "correlation").unique()
    gpu = trace.gpu.join(keep, on=["rank", "correlation"], how="semi")
    return Trace(meta=trace.meta, gpu=gpu, cpu=trace.cpu, annotations=trace.annotations,
                 syncs=trace.syncs, counters=trace.counters)


def hta_numbers(trace: Trace) -> dict:
    """Our numbers, in µs, keyed like tests/reference/hta_reference.json."""
    windowed = hta_window(trace)
    result = analyze_trace(windowed, rules=False)
    m = result.metrics
    idle = {
        int(r["stream"]): {"host_wait_us": r["idle_host_wait_ns"] / 1e3,
                           "kernel_wait_us": r["idle_kernel_wait_ns"] / 1e3,
                           "other_us": r["idle_other_ns"] / 1e3}
        for r in result.streams.iter_rows(named=True)
    }
    return {
        "kernel_time_us": m.span_ns / 1e3,
        "idle_time_us": m.idle_ns / 1e3,
        "compute_time_us": m.compute_ns / 1e3,
        "non_compute_time_us": (m.busy_ns - m.compute_ns) / 1e3,
        "overlap_pct": m.comm_overlap_pct,
        "idle": idle,
    }
