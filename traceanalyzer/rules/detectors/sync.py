"""Detectors about the host waiting for the device: hidden synchronizations, synchronous copies
and memsets, and copies from or to pageable memory."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.analysis.idle import RANK_KEYS, assign_steps, idle_gaps
from traceanalyzer.model import API_KINDS
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    attach_source,
    enclosing_op,
    ms,
    own_rank,
    pct,
    window_length,
)

# API names carry a version suffix in Nsight Systems exports (cudaStreamSynchronize_v3020).
_V = r"(_v\d+)?$"
#: Calls that block the host until the device (or a stream or event) is done.
SYNC_API = (
    r"^(cuda|hip)(StreamSynchronize|DeviceSynchronize|EventSynchronize|Memcpy|Memcpy2D|Memcpy3D)"
    + _V
    + r"|^cu(StreamSynchronize|CtxSynchronize|EventSynchronize|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD)"
    + _V
)
#: Synchronous (blocking) copy and memset API calls, as Nsight's cuda_memcpy_sync and
#: cuda_memset_sync rules list them.
SYNC_COPY_API = (
    r"^(cuda|hip)(Memcpy|Memcpy2D|Memcpy3D|MemcpyToSymbol|MemcpyFromSymbol|MemcpyPeer|"
    r"Memset|Memset2D|Memset3D|MemsetD8|MemsetD16|MemsetD32)" + _V
    + r"|^cu(MemcpyDtoH|MemcpyHtoD|MemcpyDtoD|MemcpyHtoA|MemcpyAtoH|Memcpy2D|Memcpy3D|"
    r"MemsetD8|MemsetD16|MemsetD32|MemsetD2D8|MemsetD2D16|MemsetD2D32)" + _V
)
_EVIDENCE_SOURCES = 20


def _in_steps(views, frame: pl.DataFrame, at: str = "start_ns") -> pl.DataFrame:
    """Rows inside a step (or all rows when the trace marks no steps), with their ``step``."""
    steps = views.steps
    out = assign_steps(frame, steps, at=at)
    return out.filter(pl.col("step").is_not_null()) if steps.height else out


def _blocking_reads(launches: pl.DataFrame) -> pl.Series:
    """Correlation ids of device-to-host copies into pageable memory: such a copy returns only
    once it is done (CUDA's "API synchronization behavior"), so the cudaMemcpyAsync behind
    ``.item()`` or ``.cpu()`` is itself a synchronization, and often the one that waits."""
    return launches.filter(
        pl.col("kind") == "memcpy", pl.col("copy_kind") == "DtoH", pl.col("dst_kind") == "pageable"
    )["correlation"].drop_nulls()


def _overlap_lost(views, calls: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """Add ``waited_ns``, ``gpu_idle_after_ns``, ``lost_ns`` and ``_gap`` to blocking calls
    (``rank``, ``wait_from`` (when the host began to wait), ``end_ns`` (when it returned)).

    A blocking call makes the host wait until the GPU has drained its queue (``waited``: the
    GPU's busy time from ``wait_from`` to the start of the GPU's idle gap), and the GPU then
    idles until the host has done its next work and launched more (``idle after``: from the
    call's return to the gap's end). Without the wait the host would have done that work while
    the GPU drained its queue, so the time lost is the smaller of the two: a wait before a long
    CPU stretch costs only what the GPU still had queued, and one after which the host launches
    at once costs only the relaunch. In a steady loop, that is the step time the fix saves.

    ``work`` is the GPU activity the host can have waited for: without the copies that belong
    to the waits themselves (the read a sync waits for, the pageable copy a call blocks on).
    Calls whose return falls in one gap are one wait, charged once.
    """
    gaps = idle_gaps(work, views.wall_steps, keys=RANK_KEYS).select(
        "rank", pl.col("start_ns").alias("_gs"), pl.col("end_ns").alias("_ge")
    ).sort("_gs")
    if calls.height == 0 or gaps.height == 0:
        return calls.with_columns(
            waited_ns=pl.lit(0, pl.Int64), gpu_idle_after_ns=pl.lit(0, pl.Int64),
            lost_ns=pl.lit(0, pl.Int64), _gap=pl.lit(None, pl.Int64),
        )
    inside = pl.col("_ge").is_not_null() & (pl.col("_ge") > pl.col("end_ns"))
    calls = (
        calls.with_row_index("_row")
        .sort("end_ns")
        .join_asof(gaps, left_on="end_ns", right_on="_gs", by="rank", strategy="backward",
                   check_sortedness=False)
        .with_columns(
            gpu_idle_after_ns=pl.when(inside).then(pl.col("_ge") - pl.col("end_ns")).otherwise(0),
            _gap=pl.when(inside).then(pl.col("_gs")),
        )
        .sort("_row")
    )
    # Busy time, not the span: a call can also wait for other things (a first call for CUDA to
    # start, a staged copy for the driver).
    waits = calls.select(
        "rank",
        start_ns=pl.when(inside).then("wait_from").otherwise(0),
        end_ns=pl.when(inside).then(pl.max_horizontal("_gs", "wait_from")).otherwise(0),
    )
    waited = intervals.overlap_ns(waits, work.select("rank", "start_ns", "end_ns"), name="w")
    calls = calls.with_columns(waited_ns=waited["w"]).drop("_row", "_gs", "_ge")
    per_gap = calls.group_by("_gap").agg(
        lost_ns=pl.min_horizontal(pl.col("waited_ns").max(), pl.col("gpu_idle_after_ns").max())
    )
    # The wait is charged to the gap's first call (the one that waited longest), once.
    first = pl.col("waited_ns").rank("ordinal", descending=True).over("_gap") == 1
    return calls.join(per_gap, on="_gap", how="left", nulls_equal=True).with_columns(
        lost_ns=pl.when(pl.col("_gap").is_not_null() & first).then("lost_ns").otherwise(0)
    )


def _wait_totals(calls: pl.DataFrame) -> tuple[int, int]:
    """The GPU work waited for and the GPU idle after, over ``_overlap_lost``'s waits: each gap's
    longest, counted once."""
    per_gap = calls.filter(pl.col("_gap").is_not_null()).group_by("_gap").agg(
        pl.col("waited_ns").max(), pl.col("gpu_idle_after_ns").max()
    )
    return int(per_gap["waited_ns"].sum() or 0), int(per_gap["gpu_idle_after_ns"].sum() or 0)


@detector(
    "hidden_sync",
    params=("min_impact_pct", "min_stall_us"),
    fields=("sync_count", "stall_ms", "waited_ms", "idle_ms", "lost_ms", "top_op",
            "top_op_count", "top_api", "per_step_count", "frequency"),
)
def hidden_sync(views, p: Params) -> Detection | None:
    """Host-device synchronizations inside the step loop (stream/device/event sync, blocking
    copies), attributed to the operator that made them; impact = the overlap of CPU and GPU work
    they cost: at each sync, the smaller of the GPU work the host waited for and the GPU idle
    after it (see ``_overlap_lost``)."""
    cpu = own_rank(views, views.cpu)
    launches = own_rank(views, views.launches)
    calls = cpu.filter(
        pl.col("kind").is_in(API_KINDS),
        pl.col("name").str.contains(SYNC_API)
        | pl.col("correlation").is_in(_blocking_reads(launches).implode()),
        pl.col("end_ns") - pl.col("start_ns") >= p["min_stall_us"] * NS_PER_US,
    )
    calls = _in_steps(views, calls)
    if calls.height == 0:
        return None
    # The reads a sync waits for (.item() copies its value to pinned memory, then syncs) belong
    # to the sync, not to the GPU work it waits for.
    work = launches.filter((pl.col("kind") != "memcpy") | (pl.col("copy_kind") != "DtoH")
                           .fill_null(True))
    calls = enclosing_op(calls, cpu).with_columns(wait_from=pl.coalesce("op_start_ns", "start_ns"))
    calls = _overlap_lost(views, calls, work)
    lost = int(calls["lost_ns"].sum() or 0)
    window = window_length(views)
    if not window or pct(lost, window) < p["min_impact_pct"]:
        return None
    waited, idle = _wait_totals(calls)
    # The host waits inside the operator (a device-to-host copy to pageable memory blocks before
    # the explicit sync does): its stall is the operator's time, counted once per operator.
    stalls = calls.with_columns(
        _stall_start=pl.coalesce("op_start_ns", "start_ns"),
        _stall=pl.coalesce(pl.col("op_end_ns") - pl.col("op_start_ns"),
                           pl.col("end_ns") - pl.col("start_ns")),
    ).unique(["tid", "_stall_start"])
    stall = int(stalls["_stall"].sum() or 0)
    ops = calls.group_by(pl.col("op").fill_null("(no operator recorded)")).agg(
        n=pl.len(), lost=pl.col("lost_ns").sum()
    ).sort(["lost", "n", "op"], descending=[True, True, False])
    apis = calls.group_by("name").len().sort(["len", "name"], descending=[True, False])
    top = calls.sort(["lost_ns", "gpu_idle_after_ns"], descending=True).head(_EVIDENCE_SOURCES)
    top = attach_source(top, cpu)
    evidence = top.select(
        "start_ns", "end_ns", pl.col("name").alias("api"), "op", "step",
        ((pl.col("end_ns") - pl.col("start_ns")) / NS_PER_US).alias("call_us"),
        (pl.coalesce(pl.col("op_end_ns") - pl.col("op_start_ns"), pl.col("end_ns") - pl.col("start_ns"))
         / NS_PER_US).alias("cpu_stall_us"),
        (pl.col("waited_ns") / NS_PER_US).alias("waited_us"),
        (pl.col("gpu_idle_after_ns") / NS_PER_US).alias("gpu_idle_after_us"),
        (pl.col("lost_ns") / NS_PER_US).alias("lost_us"),
        "source", "tid",
    )
    steps = views.steps.height
    return Detection(
        impact_ns=lost,
        fields={
            "sync_count": calls.height,
            "stall_ms": ms(stall),
            "waited_ms": ms(waited),
            "idle_ms": ms(idle),
            "lost_ms": ms(lost),
            "top_op": ops["op"][0],
            "top_op_count": int(ops["n"][0]),
            "top_api": apis["name"][0],
            "per_step_count": calls.height / steps if steps else None,
            "frequency": f"{calls.height / steps:.1f} per step" if steps else "no steps marked",
        },
        evidence=evidence,
    )


@detector(
    "sync_memcpy",
    params=("min_blocked_pct",),
    fields=("call_count", "blocked_ms", "top_api", "top_op"),
)
def sync_memcpy(views, p: Params) -> Detection | None:
    """Synchronous memcpy/memset API calls (Nsight's cuda_memcpy_sync / cuda_memset_sync); impact
    = the host time blocked in them."""
    cpu = own_rank(views, views.cpu)
    calls = cpu.filter(
        pl.col("kind").is_in(API_KINDS), pl.col("name").str.contains(SYNC_COPY_API)
    )
    if calls.height == 0:
        return None
    blocked = int((calls["end_ns"] - calls["start_ns"]).sum())
    window = window_length(views)
    if not window or pct(blocked, window) < p["min_blocked_pct"]:
        return None
    calls = enclosing_op(calls, cpu)
    apis = calls.group_by("name").len().sort(["len", "name"], descending=[True, False])
    ops = calls.filter(pl.col("op").is_not_null()).group_by("op").len().sort(
        ["len", "op"], descending=[True, False]
    )
    top = attach_source(
        calls.sort(pl.col("end_ns") - pl.col("start_ns"), descending=True).head(_EVIDENCE_SOURCES),
        cpu,
    )
    evidence = top.select(
        "start_ns", "end_ns", pl.col("name").alias("api"), "op",
        ((pl.col("end_ns") - pl.col("start_ns")) / NS_PER_US).alias("blocked_us"),
        "source", "tid",
    )
    return Detection(
        impact_ns=blocked,
        fields={
            "call_count": calls.height,
            "blocked_ms": ms(blocked),
            "top_api": apis["name"][0],
            "top_op": ops["op"][0] if ops.height else "an unrecorded operator",
        },
        evidence=evidence,
    )


@detector(
    "pageable_memcpy",
    params=("min_impact_pct",),
    fields=("copy_count", "copy_ms", "waited_ms", "idle_after_ms", "lost_ms", "htod_ms",
            "exposed_htod_ms", "bytes_mb", "top_op"),
)
def pageable_memcpy(views, p: Params) -> Detection | None:
    """Copies from or to pageable host memory (Nsight's cuda_memcpy_async: they are not really
    asynchronous). A host-to-device copy from pageable memory can make its call wait for the
    stream to drain; its cost is the copy plus the overlap of CPU and GPU work that wait lost
    (see ``_overlap_lost``); fires when that is at least ``min_impact_pct`` of the window."""
    launches = own_rank(views, views.launches)
    copies = launches.filter(pl.col("kind") == "memcpy")
    if copies.height == 0:
        return None
    if copies["src_kind"].null_count() == copies.height and copies["dst_kind"].null_count() == copies.height:
        raise NotApplicable("the memory kinds of copies (pageable or pinned) were not recorded")
    is_pageable = (pl.col("src_kind") == "pageable") | (pl.col("dst_kind") == "pageable")
    pageable = copies.filter(is_pageable).with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns")
    ).with_row_index("_copy")
    if pageable.height == 0:
        return None
    # Only host-to-device copies are charged with a wait: device-to-host reads (.item(), .cpu())
    # are syncs, which hidden-sync charges. A small pageable copy is staged by the driver and its
    # call returns at once (CUDA's "API synchronization behavior"): its call's span holds no GPU
    # work, so it lost nothing. The copies themselves are left out of the GPU work waited for.
    htod = (pl.col("copy_kind") == "HtoD") & pl.col("launch_end_ns").is_not_null()
    calls = pageable.filter(htod).select(
        "_copy", "rank", pl.col("launch_start_ns").alias("wait_from"),
        pl.col("launch_end_ns").alias("end_ns"),
    )
    work = launches.filter(~(is_pageable & (pl.col("copy_kind") == "HtoD")).fill_null(False))
    calls = _overlap_lost(views, calls, work)
    pageable = pageable.join(
        calls.select("_copy", "waited_ns", "gpu_idle_after_ns", "lost_ns", "_gap"),
        on="_copy", how="left",
    ).drop("_copy").with_columns(pl.col("waited_ns", "gpu_idle_after_ns", "lost_ns").fill_null(0))
    lost = int(pageable["lost_ns"].sum() or 0)
    total = int(pageable["dur"].sum())
    window = window_length(views)
    if not window or pct(total + lost, window) < p["min_impact_pct"]:
        return None
    waited, idle_after = _wait_totals(pageable)
    # Exposed: the part of a copy during which no kernel runs, i.e. on the critical path.
    kernels = launches.filter(pl.col("kind") == "kernel").select("rank", "start_ns", "end_ns")
    pageable = intervals.overlap_ns(pageable, kernels, name="covered_ns").with_columns(
        exposed_ns=pl.col("dur") - pl.col("covered_ns")
    )
    htod_copies = pageable.filter(pl.col("copy_kind") == "HtoD")
    ops = pageable.filter(pl.col("op_name").is_not_null()).group_by("op_name").agg(
        pl.col("dur").sum()
    ).sort(["dur", "op_name"], descending=[True, False])
    top = pageable.sort(pl.col("dur") + pl.col("lost_ns"), descending=True).head(_EVIDENCE_SOURCES)
    top = attach_source(
        top.with_columns(pl.coalesce("launch_start_ns", "start_ns").alias("_ls"),
                         pl.coalesce("launch_end_ns", "end_ns").alias("_le"),
                         pl.col("launch_tid").alias("tid")),
        views.cpu, start="_ls", end="_le",
    )
    evidence = top.select(
        "start_ns", "end_ns", "name", "copy_kind", "src_kind", "dst_kind", "bytes", "stream",
        pl.col("launch_name").alias("api"), pl.col("op_name").alias("op"),
        (pl.col("dur") / NS_PER_US).alias("duration_us"),
        (pl.col("exposed_ns") / NS_PER_US).alias("exposed_us"),
        (pl.col("waited_ns") / NS_PER_US).alias("waited_us"),
        (pl.col("gpu_idle_after_ns") / NS_PER_US).alias("gpu_idle_after_us"),
        (pl.col("lost_ns") / NS_PER_US).alias("lost_us"), "source",
    )
    return Detection(
        impact_ns=total + lost,
        fields={
            "copy_count": pageable.height,
            "copy_ms": ms(total),
            "waited_ms": ms(waited),
            "idle_after_ms": ms(idle_after),
            "lost_ms": ms(lost),
            "htod_ms": ms(htod_copies["dur"].sum()),
            "exposed_htod_ms": ms(htod_copies["exposed_ns"].sum()),
            "bytes_mb": float(pageable["bytes"].sum() or 0) / 1e6,
            "top_op": ops["op_name"][0] if ops.height else "an unrecorded operator",
        },
        evidence=evidence,
    )
