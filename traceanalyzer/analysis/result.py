"""The result of analyzing one trace: what reports and the CLI read.

Everything here is derived from the canonical frames by ``traceanalyzer.analysis.analyze_trace``.
Reports never go back to the raw trace, so a report can be rebuilt from this object alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.analysis.window import Window, window_of
from traceanalyzer.findings import (
    IMPACTS_OVERLAP,
    PROFILER_OVERHEAD,
    PROFILER_OVERHEAD_MIN_HOST_WAIT_PCT,
    Finding,
    RuleOutcome,
)
from traceanalyzer.model import TraceMeta


@dataclass
class Metrics:
    """Headline numbers for one rank over the analyzed window (all times in ns).

    Definitions follow HTA where HTA defines the quantity (see docs/metrics.md):
    span = last GPU end - first GPU start; busy = |union of GPU intervals|; idle = span - busy;
    idle is split by cause per stream (host wait, kernel wait, other) and summed over streams.
    """

    rank: int = 0
    #: What the window is (analysis.window.Window.kind): "steps" (the steady state), "all",
    #: "profiler-range", "time" or "selection"; window_start/end_ns bound the GPU span in it.
    window_kind: str = "all"
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    span_ns: int = 0
    busy_ns: int = 0
    idle_ns: int = 0
    # Idle by cause over the gaps when no stream is busy; they add up to idle_ns. HTA's
    # per-stream breakdown is in AnalysisResult.streams.
    idle_host_wait_ns: int = 0
    idle_kernel_wait_ns: int = 0
    idle_other_ns: int = 0
    compute_ns: int = 0  # |union of compute kernels|
    communication_ns: int = 0  # |union of communication kernels|
    memory_ns: int = 0  # |union of memcpy and memset|
    exposed_communication_ns: int = 0  # communication not covered by compute
    #: Exposed transfer: the collectives' transfers not covered by compute, their wait for the
    #: other ranks left out (analysis/comm.py; rule nccl-not-overlapped's and the job view's
    #: figure); None without communication. comm_wait_ns: that wait with no compute beside it
    #: (rule collective-wait's). exposed_transfer_basis: what the wait was estimated from,
    #: "ranks" (other ranks in the same analysis), "steps" (this rank's other steps) or
    #: "none" (nothing to compare with: whole durations count).
    exposed_transfer_ns: int | None = None
    comm_wait_ns: int | None = None
    exposed_transfer_basis: str | None = None
    comm_overlap_pct: float | None = None  # HTA: |compute ∩ comm| / |comm|
    kernel_count: int = 0
    memcpy_count: int = 0
    memset_count: int = 0
    step_count: int = 0
    kernels_per_step: float | None = None
    step_time_mean_ns: float | None = None
    step_time_p50_ns: float | None = None
    step_time_p95_ns: float | None = None
    launch_delay_mean_ns: float | None = None
    launch_delay_p50_ns: float | None = None
    launch_delay_p95_ns: float | None = None
    #: Share of the window the CPU spent in kernel-launch API calls.
    launch_overhead_pct: float | None = None
    #: The highest device memory of the rank's busiest device in the window (analysis.memory):
    #: the caching allocator's totals allocated and reserved; from the driver's allocations
    #: when only those are recorded (then allocated is null).
    peak_memory_allocated_bytes: int | None = None
    peak_memory_reserved_bytes: int | None = None

    @property
    def busy_pct(self) -> float:
        return 100.0 * self.busy_ns / self.span_ns if self.span_ns else 0.0

    @property
    def host_wait_pct(self) -> float:
        """The GPU's idle waiting for the host to issue work, in % of the span."""
        return 100.0 * self.idle_host_wait_ns / self.span_ns if self.span_ns else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["busy_pct"] = self.busy_pct
        return out


@dataclass
class AnalysisResult:
    """Everything known about one trace after analysis."""

    meta: TraceMeta
    metrics: Metrics
    #: One row per step: step, name, start_ns, end_ns, duration_ns, busy_ns, idle_ns,
    #: idle_host_wait_ns, idle_kernel_wait_ns, idle_other_ns, kernel_count, launch_count, outlier.
    steps: pl.DataFrame
    #: One row per kernel name: name, category, instances, total_ns, mean_ns, median_ns,
    #: min_ns, max_ns, stddev_ns, pct_gpu_time.
    kernels: pl.DataFrame
    #: One row per category: category, total_ns, pct_gpu_time, count.
    categories: pl.DataFrame
    #: Top CPU operators by the GPU time of the kernels they launched:
    #: name, gpu_ns, kernel_count, calls.
    operators: pl.DataFrame
    #: GPU utilization over time: bucket_start_ns, bucket_end_ns, busy_pct.
    utilization: pl.DataFrame
    #: One row per stream: device, stream, kernel_count, busy_ns, idle_*_ns.
    streams: pl.DataFrame
    findings: list[Finding] = field(default_factory=list)
    rule_outcomes: list[RuleOutcome] = field(default_factory=list)
    #: Per-rank metrics and straggler info when several ranks were analyzed as one job.
    ranks: pl.DataFrame | None = None
    #: Device memory (analysis.memory): per (rank, device) the peaks, when, in which step, % of
    #: the device; the operators holding the most at the allocated peak; the headline device's
    #: totals over time. None when the trace records no memory events.
    memory: pl.DataFrame | None = None
    memory_holders: pl.DataFrame | None = None
    memory_timeline: pl.DataFrame | None = None
    #: The performance model (traceanalyzer.perfmodel): per (operator signature, kernel name)
    #: the kernels' time, FLOPs and bytes; and its summary (flops_per_step, flops_by_op,
    #: flops_source, reason). ``perf_options`` (peaks, tokens, FLOPs the user gives) is set by
    #: the caller after the analysis and is not cached.
    perf: pl.DataFrame | None = None
    perf_summary: dict[str, Any] | None = None
    perf_options: Any = None
    #: Nsight Compute's profiled launches judged (analysis.ncu.kernel_table): one row per
    #: launch with its roofline verdict, the timeline's matching kernel and the findings that
    #: named it. None without kernel metrics.
    kernel_verdicts: pl.DataFrame | None = None
    #: The headline rank's critical path (analysis.critical_path): per step its wall-clock
    #: range and the path's time by category (``<category>_ns``, adding up to the step), and the
    #: path's segments for drawing (start_ns, end_ns, category, lane, name). None without GPU
    #: activity.
    critical_path: pl.DataFrame | None = None
    critical_segments: pl.DataFrame | None = None
    #: Every rank's critical path per step (analysis.path_ranks.STEP_SCHEMA: rank, step and the
    #: headline's columns), and per (rank, step, GPU) the path's time on that GPU (``path_ns``).
    critical_path_ranks: pl.DataFrame | None = None
    critical_path_gpus: pl.DataFrame | None = None
    #: The what-if summary (analysis.whatif.predict): rank, the step time now (``step_time_ns``)
    #: and ``all`` (every modelled fix at once: step_time_ns, saving_ns, assumes).
    what_if: dict[str, Any] | None = None

    @property
    def window(self) -> Window | None:
        """What was judged: captured, analyzed, left out (analysis.window.choose_window)."""
        return window_of(self.meta.extra)

    @property
    def gpus_used(self) -> int:
        """GPUs the headline rank ran work on. A process can drive several; the headline's busy
        and idle then count the union of them (any GPU busy), as HTA does for a rank."""
        streams = self.streams
        if streams.is_empty() or "device" not in streams.columns:
            return 0
        if "rank" in streams.columns:
            streams = streams.filter(pl.col("rank") == self.metrics.rank)
        return streams["device"].n_unique()

    @property
    def gpus_note(self) -> str:
        """What the headline's busy covers when it is a union of GPUs ("any of 2 GPUs"), else ""."""
        return f"any of {self.gpus_used} GPUs" if self.gpus_used > 1 else ""

    def notes(self) -> list[str]:
        """How to read the findings, said under them in every report."""
        if not self.findings:
            return []
        out = [IMPACTS_OVERLAP] if len(self.findings) > 1 else []
        extra = self.meta.extra
        host_wait = self.metrics.host_wait_pct
        if (self.meta.source_format == "kineto" and _recorded(extra.get("with_stack"))
                and host_wait >= PROFILER_OVERHEAD_MIN_HOST_WAIT_PCT):
            shapes = " and record_shapes=True" if _recorded(extra.get("record_shapes")) else ""
            out.append(PROFILER_OVERHEAD.format(shapes=shapes, host_wait=host_wait))
        return out


def _recorded(flag: Any) -> bool:
    """A Kineto metadata flag (``"with_stack": 1``) that says an option was on."""
    return flag == 1 or str(flag).lower() in ("1", "true")  # True == 1 too
