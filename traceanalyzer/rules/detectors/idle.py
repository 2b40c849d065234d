"""Detectors about GPU idle time: idle gaps, data-loader stalls, utilization over time,
launch-bound steps, and the GPUs of one process taking turns. Gaps and their causes come from
``Views.gpu_idle_gaps`` (gaps in the union of a rank's GPU activity, classified as HTA does)."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    attach_source,
    ms,
    own_rank,
    pct,
    window_length,
)

#: Host-side ranges that are data loading: PyTorch's DataLoader iterator, or a user/NVTX range
#: with a data/batch/load word in its name ("load_batch", "data", "get_batch", "wait_for_batch").
DATALOADER_OP = r"(?i)dataloader"
DATALOADER_RANGE = r"(?i)(^|[^a-z])(data|batch|batches|load|loader|loading|dataloader|prefetch)([^a-z]|$)|dataloader"
#: Python frames (``with_stack=True``) that build batches: a data set's ``__getitem__``, a collate
#: function, or the DataLoader iterator, for loops that load data without a DataLoader.
DATALOADER_FRAME = r"\): (__getitem__|__getitems__|_?collate\w*|fetch)$|dataloader\.py\(\d+\): __next__$"
#: ...but not indexing of framework containers (nn.Sequential[i], ModuleList, ParameterDict).
NOT_DATALOADER_FRAME = r"^<|torch/nn/|torch/_|torch/fx/|torch/distributed/"


def _evidence_gaps(views, gaps: pl.DataFrame) -> pl.DataFrame:
    """Gap rows as evidence, with the code that issued the work after the gap when recorded."""
    launches = views.launches.select(
        "rank", pl.col("correlation").alias("next_correlation"), "call_stack",
        pl.col("launch_tid").alias("tid"),
        pl.col("launch_start_ns").fill_null(0).alias("_ls"),
        pl.col("launch_end_ns").fill_null(0).alias("_le"),
    ).unique(["rank", "next_correlation"], keep="first")
    out = gaps.join(launches, on=["rank", "next_correlation"], how="left") if gaps.height else gaps
    if out.height and "_ls" in out.columns:
        # the line of Python that issued the work the GPU waited for (with_stack=True traces)
        out = attach_source(out.head(20), views.cpu, start="_ls", end="_le")
    cols = [
        "start_ns", "end_ns", (pl.col("duration_ns") / NS_PER_US).alias("duration_us"), "cause",
        "step", "device", "stream", pl.col("prev_name").alias("prev_kernel"),
        pl.col("next_name").alias("next_kernel"), pl.col("next_op_name").alias("next_op"),
    ]
    cols += [c for c in ("source", "call_stack") if c in out.columns]
    return out.select(cols)


@detector(
    "idle_gaps",
    params=("min_gap_us", "min_idle_pct"),
    fields=("idle_ms", "idle_pct", "gap_count", "host_wait_pct", "kernel_wait_pct", "other_pct",
            "verdict", "worst_stream", "worst_step", "worst_step_idle_ms", "where"),
)
def idle_gaps(views, p: Params) -> Detection | None:
    """GPU idle periods (no stream busy) of at least ``min_gap_us``, when together they are at
    least ``min_idle_pct`` of the window; split by cause, stream and step."""
    window = window_length(views)
    gaps = own_rank(views, views.gpu_idle_gaps).filter(
        pl.col("duration_ns") >= p["min_gap_us"] * NS_PER_US
    )
    idle = int(gaps["duration_ns"].sum() or 0)
    if not window or gaps.height == 0 or pct(idle, window) < p["min_idle_pct"]:
        return None
    by_cause = dict(gaps.group_by("cause").agg(pl.col("duration_ns").sum()).iter_rows())
    host = pct(by_cause.get("host_wait", 0), idle)
    if host >= 50:
        verdict = "Host wait dominates: the GPU waits for the CPU to issue work (CPU-bound)."
    elif pct(by_cause.get("other", 0), idle) >= 50:
        verdict = "Most gaps have no queued work and are not launch waits (syncs, events, I/O)."
    else:
        verdict = "Most gaps are short waits between back-to-back kernels."
    # Per-stream view: the stream whose own long gaps add up to the most.
    stream_gaps = own_rank(views, views.idle_gaps).filter(
        pl.col("duration_ns") >= p["min_gap_us"] * NS_PER_US
    )
    worst_stream = None
    if stream_gaps.height:
        worst_stream = (
            stream_gaps.group_by("stream").agg(pl.col("duration_ns").sum())
            .sort(["duration_ns", "stream"], descending=[True, False])["stream"][0]
        )
    worst_step, worst_step_idle = None, 0
    stepped = gaps.filter(pl.col("step").is_not_null())
    if stepped.height:
        row = (
            stepped.group_by("step").agg(pl.col("duration_ns").sum())
            .sort(["duration_ns", "step"], descending=[True, False]).row(0)
        )
        worst_step, worst_step_idle = row[0], row[1]
    where = f"Most idle in step {worst_step} ({ms(worst_step_idle):.1f} ms)" if worst_step is not None else "No steps marked"
    where += f"; stream {worst_stream} has the most long gaps." if worst_stream is not None else "."
    evidence = _evidence_gaps(views, gaps.sort("duration_ns", descending=True).head(50))
    return Detection(
        impact_ns=idle,
        fields={
            "idle_ms": ms(idle),
            "idle_pct": pct(idle, window),
            "gap_count": gaps.height,
            "host_wait_pct": host,
            "kernel_wait_pct": pct(by_cause.get("kernel_wait", 0), idle),
            "other_pct": pct(by_cause.get("other", 0), idle),
            "verdict": verdict,
            "worst_stream": worst_stream,
            "worst_step": worst_step,
            "worst_step_idle_ms": ms(worst_step_idle),
            "where": where,
        },
        evidence=evidence,
    )


def loader_ranges(views) -> pl.DataFrame:
    """Host ranges spent loading data: rank, name, start_ns, end_ns."""
    ann = views.annotations.filter(
        pl.col("kind").is_in(["user", "nvtx"]), pl.col("name").str.contains(DATALOADER_RANGE),
        pl.col("end_ns") > pl.col("start_ns"),
    ).select("rank", "name", "start_ns", "end_ns")
    is_op = pl.col("kind").is_in(["op", "other"]) & pl.col("name").str.contains(DATALOADER_OP)
    is_frame = (
        (pl.col("kind") == "python")
        & pl.col("name").str.contains(DATALOADER_FRAME)
        & ~pl.col("name").str.contains(NOT_DATALOADER_FRAME)
    )
    cpu = views.cpu.filter(is_op | is_frame, pl.col("end_ns") > pl.col("start_ns")).select(
        "rank", "name", "start_ns", "end_ns"
    )
    return own_rank(views, pl.concat([ann, cpu]))


@detector(
    "dataloader_stall",
    params=("min_stall_pct",),
    fields=("stall_ms", "stall_pct", "range_count", "top_range", "loading_ms"),
)
def dataloader_stall(views, p: Params) -> Detection | None:
    """GPU idle while the host is inside a data-loading range, when at least ``min_stall_pct``
    of the window."""
    ranges = loader_ranges(views)
    if ranges.height == 0:
        raise NotApplicable(
            "no data loading was recorded (a DataLoader, a user/NVTX range named like data, "
            "batch or load, or a Dataset __getitem__ in a with_stack=True trace)"
        )
    window = window_length(views)
    gaps = own_rank(views, views.gpu_idle_gaps)
    if not window or gaps.height == 0:
        return None
    merged = ranges.select("rank", "start_ns", "end_ns")
    merged = intervals.merge(merged, by=["rank"])
    stall = int(intervals.overlap_ns(merged, gaps.select("rank", "start_ns", "end_ns"))["overlap_ns"].sum())
    if pct(stall, window) < p["min_stall_pct"]:
        return None
    per_range = intervals.overlap_ns(ranges, gaps.select("rank", "start_ns", "end_ns"), name="gpu_idle_ns")
    per_range = per_range.filter(pl.col("gpu_idle_ns") > 0).sort("gpu_idle_ns", descending=True)
    top = per_range.group_by("name").agg(pl.col("gpu_idle_ns").sum()).sort(
        ["gpu_idle_ns", "name"], descending=[True, False]
    )
    evidence = per_range.select(
        "start_ns", "end_ns", "name",
        ((pl.col("end_ns") - pl.col("start_ns")) / NS_PER_US).alias("duration_us"),
        (pl.col("gpu_idle_ns") / NS_PER_US).alias("gpu_idle_us"),
    )
    return Detection(
        impact_ns=stall,
        fields={
            "stall_ms": ms(stall),
            "stall_pct": pct(stall, window),
            "range_count": per_range.height,
            "top_range": top["name"][0] if top.height else None,
            "loading_ms": ms(intervals.total(merged)),
        },
        evidence=evidence,
    )


@detector(
    "gpu_time_util",
    params=("chunks_count", "max_util_pct", "min_low_chunks_pct"),
    fields=("low_chunks", "chunks", "mean_util_pct", "worst_util_pct", "low_idle_ms"),
)
def gpu_time_util(views, p: Params) -> Detection | None:
    """Nsight Systems' ``gpu_time_util``: split the window into ``chunks_count`` equal chunks and
    flag those under ``max_util_pct`` GPU time; fires when at least ``min_low_chunks_pct`` of the
    chunks are low (one slow chunk, e.g. warm-up, is not a finding)."""
    window = views.window
    acts = own_rank(views, views.gpu)
    if not window or acts.height == 0 or window[1] <= window[0]:
        return None
    chunks = int(p["chunks_count"])
    edges = np.linspace(window[0], window[1], chunks + 1).astype(np.int64)
    merged = intervals.merge(acts)
    busy = intervals.covered_between(merged, edges[:-1], edges[1:])
    width = np.maximum(edges[1:] - edges[:-1], 1)
    table = pl.DataFrame({
        "start_ns": edges[:-1], "end_ns": edges[1:],
        "util_pct": 100.0 * busy / width, "idle_ns": width - busy,
    })
    low = table.filter(pl.col("util_pct") < p["max_util_pct"])
    if pct(low.height, chunks) < p["min_low_chunks_pct"]:
        return None
    idle = int(low["idle_ns"].sum())
    evidence = low.sort("util_pct").select(
        "start_ns", "end_ns", "util_pct", (pl.col("idle_ns") / NS_PER_US).alias("idle_us")
    )
    return Detection(
        impact_ns=idle,
        fields={
            "low_chunks": low.height,
            "chunks": chunks,
            "mean_util_pct": float(100.0 * busy.sum() / width.sum()),
            "worst_util_pct": float(low["util_pct"].min()),
            "low_idle_ms": ms(idle),
        },
        evidence=evidence,
    )


@detector(
    "launch_overhead",
    params=("max_kernel_us", "min_short_kernels_pct", "min_kernels_count", "max_launch_gap_us",
            "min_gap_to_run_ratio"),
    fields=("flagged_steps", "steps_seen", "kernels_per_step", "short_kernel_pct",
            "launch_overhead_pct", "median_kernel_us", "gap_ms", "run_ms"),
)
def launch_overhead(views, p: Params) -> Detection | None:
    """Steps made mostly of short kernels (< ``max_kernel_us``) where the GPU waits for the host
    to launch them (host-wait gaps up to ``max_launch_gap_us``) longer than the kernels run."""
    kernels = own_rank(views, views.launches).filter(pl.col("kind") == "kernel")
    if kernels.height == 0:
        return None
    has_steps = views.steps.height > 0
    step = pl.col("step") if has_steps else pl.lit(0, pl.Int64).alias("step")
    kernels = kernels.with_columns(step).filter(pl.col("step").is_not_null())
    gaps = own_rank(views, views.gpu_idle_gaps).filter(
        pl.col("cause") == "host_wait", pl.col("duration_ns") <= p["max_launch_gap_us"] * NS_PER_US
    ).with_columns(step)
    per_step = kernels.group_by("step").agg(
        kernels=pl.len(),
        short=(pl.col("end_ns") - pl.col("start_ns") < p["max_kernel_us"] * NS_PER_US).sum(),
        run_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
        median_ns=(pl.col("end_ns") - pl.col("start_ns")).median(),
        first_ns=pl.col("start_ns").min(),
        last_ns=pl.col("end_ns").max(),
    ).join(
        gaps.filter(pl.col("step").is_not_null()).group_by("step").agg(
            gap_ns=pl.col("duration_ns").sum(), gaps=pl.len()
        ),
        on="step", how="left",
    ).with_columns(pl.col("gap_ns").fill_null(0), pl.col("gaps").fill_null(0))
    flagged = per_step.filter(
        pl.col("kernels") >= p["min_kernels_count"],
        pl.col("short") * 100 >= p["min_short_kernels_pct"] * pl.col("kernels"),
        pl.col("gap_ns") > p["min_gap_to_run_ratio"] * pl.col("run_ns"),
    )
    if flagged.height == 0:
        return None
    gap_ns = int(flagged["gap_ns"].sum())
    span = int((flagged["last_ns"] - flagged["first_ns"]).sum())
    evidence = flagged.sort("gap_ns", descending=True).select(
        pl.col("first_ns").alias("start_ns"), pl.col("last_ns").alias("end_ns"), "step",
        "kernels", pl.col("short").alias("short_kernels"),
        (pl.col("run_ns") / NS_PER_US).alias("kernel_run_us"),
        (pl.col("gap_ns") / NS_PER_US).alias("launch_gap_us"),
        (pl.col("median_ns") / NS_PER_US).alias("median_kernel_us"),
    )
    return Detection(
        impact_ns=gap_ns,
        fields={
            "flagged_steps": flagged.height,
            "steps_seen": per_step.height,
            "kernels_per_step": float(flagged["kernels"].mean()),
            "short_kernel_pct": pct(flagged["short"].sum(), flagged["kernels"].sum()),
            "launch_overhead_pct": pct(gap_ns, span),
            "median_kernel_us": float((kernels["end_ns"] - kernels["start_ns"]).median() or 0)
            / NS_PER_US,
            "gap_ms": ms(gap_ns),
            "run_ms": ms(flagged["run_ns"].sum()),
        },
        evidence=evidence,
    )


def _time_by_busy_count(merged: pl.DataFrame) -> pl.DataFrame:
    """How long exactly n devices were busy, for each n ≥ 1 (``n``, ``duration_ns``), from each
    device's merged busy intervals: a sweep over their starts (+1) and ends (-1)."""
    edges = pl.concat([merged.select(t="start_ns", delta=pl.lit(1)),
                       merged.select(t="end_ns", delta=pl.lit(-1))])
    # At equal times ends come first, so that touching intervals do not count as overlapping.
    return (edges.sort("t", "delta")
            .with_columns(n=pl.col("delta").cum_sum(), duration_ns=pl.col("t").shift(-1) - pl.col("t"))
            .filter(pl.col("n") > 0)
            .group_by("n").agg(pl.col("duration_ns").sum()).sort("n"))


@detector(
    "gpus_take_turns",
    params=("min_device_share_pct", "min_impact_pct"),
    fields=("device_count", "busy_ms", "one_busy_pct", "busiest_ms", "busiest_device",
            "saving_ms", "saving_pct"),
)
def gpus_take_turns(views, p: Params) -> Detection | None:
    """A rank (one process) that drives several GPUs, whose GPUs work one after another instead
    of side by side. The saving is the time any of them was busy minus the busiest one's busy
    time: what running their work concurrently would save, at best."""
    gpu = own_rank(views, views.gpu)
    merged = intervals.merge(gpu, by=["device"])
    busy = merged.group_by("device").agg(busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    # A device with a sliver of the work (a copy to it, a peer's synchronization) is not one the
    # process splits its work across.
    share = intervals.union_length(gpu) * p["min_device_share_pct"] / 100
    busy = busy.filter(pl.col("busy_ns") >= share).sort(["busy_ns", "device"],
                                                         descending=[True, False])
    window = window_length(views)
    if busy.height < 2 or not window:
        return None
    merged = merged.filter(pl.col("device").is_in(busy["device"].implode()))
    union = intervals.union_length(merged)
    busiest = int(busy["busy_ns"][0])
    saving = union - busiest
    if pct(saving, window) < p["min_impact_pct"]:
        return None
    by_count = _time_by_busy_count(merged)
    one_busy = int(by_count.filter(pl.col("n") == 1)["duration_ns"].sum())
    return Detection(
        impact_ns=saving,
        fields={
            "device_count": busy.height,
            "busy_ms": ms(union),
            "one_busy_pct": pct(one_busy, union),
            "busiest_ms": ms(busiest),
            "busiest_device": int(busy["device"][0]),
            "saving_ms": ms(saving),
            "saving_pct": pct(saving, window),
        },
        evidence=busy.select(
            "device", (pl.col("busy_ns") / NS_PER_US).alias("busy_us"),
            (100.0 * pl.col("busy_ns") / window).alias("busy_pct_of_window"),
        ),
    )
