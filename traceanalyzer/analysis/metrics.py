"""Headline metrics per rank: temporal breakdown, idle by cause, overlap, steps and launches.

Definitions follow HTA (``../shared/docs/ANCHORS.md``, ``docs/metrics.md``):
span = last GPU end - first GPU start over all GPU activity; busy = |union|; idle = span - busy;
compute = |union of kernels that are neither communication nor memory|; exposed communication =
|comm| - |comm ∩ compute|; overlap = |comm ∩ compute| / |comm|.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.analysis.result import Metrics
from traceanalyzer.model import API_KINDS

#: CPU API calls that launch GPU work; their total time is the launch overhead.
LAUNCH_API_PATTERN = r"^(cuda|hip|cu)(LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|ExtModuleLaunchKernel|GraphLaunch|LaunchKernelExC|LaunchKernelEx)"


def compute_metrics(rank: int, launches: pl.DataFrame, cpu: pl.DataFrame, gaps: pl.DataFrame,
                    steps: pl.DataFrame) -> Metrics:
    """Metrics of one rank; every frame given must already be filtered to that rank."""
    m = Metrics(rank=rank)
    # The columns read here: every filter below would otherwise copy the names and stacks too.
    launches = launches.select("kind", "category", "start_ns", "end_ns", "launch_delay_ns",
                               "step")
    cpu = cpu.select("kind", "name", "start_ns", "end_ns")
    if not launches.is_empty():
        m.window_start_ns = int(launches["start_ns"].min())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
        m.window_end_ns = int(launches["end_ns"].max())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
        m.span_ns = m.window_end_ns - m.window_start_ns
        m.busy_ns = intervals.union_length(launches)
        m.idle_ns = m.span_ns - m.busy_ns
        is_comm = pl.col("category") == "communication"
        is_memory = pl.col("kind").is_in(["memcpy", "memset"])
        compute = launches.filter(~is_comm & ~is_memory)
        comm = launches.filter(is_comm)
        m.compute_ns = intervals.union_length(compute)
        m.communication_ns = intervals.union_length(comm)
        m.memory_ns = intervals.union_length(launches.filter(is_memory))
        overlap = intervals.intersection_length(compute, comm)
        m.exposed_communication_ns = m.communication_ns - overlap
        m.comm_overlap_pct = 100.0 * overlap / m.communication_ns if m.communication_ns else None
        counts = launches.group_by(pl.col("kind").cast(pl.String)).len()
        by_kind = dict(zip(counts["kind"], counts["len"], strict=True))
        m.kernel_count = int(by_kind.get("kernel", 0))
        m.memcpy_count = int(by_kind.get("memcpy", 0))
        m.memset_count = int(by_kind.get("memset", 0))
        delays = launches.filter(pl.col("kind") == "kernel")["launch_delay_ns"].drop_nulls()
        if delays.len():
            m.launch_delay_mean_ns = float(delays.mean())  # type: ignore[arg-type]
            m.launch_delay_p50_ns = float(delays.quantile(0.5, "nearest"))  # type: ignore[arg-type]
            m.launch_delay_p95_ns = float(delays.quantile(0.95, "nearest"))  # type: ignore[arg-type]
    if not gaps.is_empty():
        by_cause = gaps.group_by("cause").agg(pl.col("duration_ns").sum())
        causes = dict(zip(by_cause["cause"], by_cause["duration_ns"], strict=True))
        m.idle_host_wait_ns = int(causes.get("host_wait", 0))
        m.idle_kernel_wait_ns = int(causes.get("kernel_wait", 0))
        m.idle_other_ns = int(causes.get("other", 0))
    if not steps.is_empty():
        durations = steps["end_ns"] - steps["start_ns"]
        m.step_count = steps.height
        m.step_time_mean_ns = float(durations.mean())
        m.step_time_p50_ns = float(durations.quantile(0.5, "nearest"))
        m.step_time_p95_ns = float(durations.quantile(0.95, "nearest"))
        in_steps = launches.filter(pl.col("kind") == "kernel", pl.col("step").is_not_null()).height
        m.kernels_per_step = in_steps / steps.height
    window = _cpu_window(m, cpu)
    if window:
        launch_calls = cpu.lazy().filter(
            pl.col("kind").is_in(API_KINDS), pl.col("name").str.contains(LAUNCH_API_PATTERN)
        ).select("start_ns", "end_ns").collect()
        if not launch_calls.is_empty():
            busy = intervals.union_length(intervals.clip(launch_calls, *window))
            m.launch_overhead_pct = 100.0 * busy / (window[1] - window[0])
    return m


def _cpu_window(m: Metrics, cpu: pl.DataFrame) -> tuple[int, int] | None:
    if m.window_start_ns is not None and m.window_end_ns and m.span_ns > 0:
        return m.window_start_ns, m.window_end_ns
    if cpu.is_empty():
        return None
    start, end = int(cpu["start_ns"].min()), int(cpu["end_ns"].max())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    return (start, end) if end > start else None
