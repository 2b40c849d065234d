"""hidden-sync: host-device synchronizations inside the step loop, charged with the overlap
of CPU and GPU work they cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis.idle import assign_steps
from traceanalyzer.model import API_KINDS
from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    attach_source,
    enclosing_op,
    ms,
    own_rank,
    pct,
    window_length,
)
from traceanalyzer.rules.detectors._sync import (
    API_VERSION,
    EVIDENCE_SOURCES,
    overlap_lost,
    wait_totals,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: Calls that block the host until the device (or a stream or event) is done.
SYNC_API = (
    r"^(cuda|hip)(StreamSynchronize|DeviceSynchronize|EventSynchronize|Memcpy|Memcpy2D|Memcpy3D)"
    + API_VERSION
    + r"|^cu(StreamSynchronize|CtxSynchronize|EventSynchronize|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD)"
    + API_VERSION
)


def _in_steps(views: Views, frame: pl.DataFrame, at: str = "start_ns") -> pl.DataFrame:
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


@detector(
    params=("min_impact_pct", "min_stall_us"),
    fields=("sync_count", "stall_ms", "waited_ms", "idle_ms", "lost_ms", "top_op",
            "top_op_count", "top_api", "per_step_count", "frequency", "costliest"),
)
def hidden_sync(views: Views, p: Params) -> Detection | None:
    """Host-device synchronizations inside the step loop (stream/device/event sync, blocking
    copies), attributed to the operator that made them; impact = the overlap of CPU and GPU work
    they cost: at each sync, the smaller of the GPU work the host waited for and the GPU idle
    after it (see ``overlap_lost``)."""
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
    # (overlap_lost reads their ranks and times only: the rest is not copied.)
    work = launches.select("rank", "start_ns", "end_ns", "kind", "copy_kind").filter(
        (pl.col("kind") != "memcpy") | (pl.col("copy_kind") != "DtoH").fill_null(True))
    calls = enclosing_op(calls, cpu).with_columns(wait_from=pl.coalesce("op_start_ns", "start_ns"))
    calls = overlap_lost(views, calls, work)
    lost = int(calls["lost_ns"].sum() or 0)
    window = window_length(views)
    if not window or pct(lost, window) < p["min_impact_pct"]:
        return None
    waited, idle = wait_totals(calls)
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
    top = calls.sort(["lost_ns", "gpu_idle_after_ns"], descending=True).head(EVIDENCE_SOURCES)
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
            # Named only where the trace records operators (an Nsight Systems trace has none).
            "costliest": (f"; costliest operator {ops['op'][0]}, {int(ops['n'][0])}x"
                          if calls["op"].is_not_null().any() else ""),
            "top_api": apis["name"][0],
            "per_step_count": calls.height / steps if steps else None,
            "frequency": f"{calls.height / steps:.1f} per step" if steps else "no steps marked",
        },
        evidence=evidence,
    )
