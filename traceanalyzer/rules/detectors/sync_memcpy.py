"""sync-memcpy: synchronous (blocking) memcpy and memset calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.model import API_KINDS
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    attach_source,
    enclosing_op,
    ms,
    origin,
    own_rank,
    pct,
    records_operators,
    window_length,
)
from traceanalyzer.rules.detectors._sync import API_VERSION, EVIDENCE_SOURCES

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: Synchronous (blocking) copy and memset API calls, as Nsight's cuda_memcpy_sync and
#: cuda_memset_sync rules list them.
SYNC_COPY_API = (
    r"^(cuda|hip)(Memcpy|Memcpy2D|Memcpy3D|MemcpyToSymbol|MemcpyFromSymbol|MemcpyPeer|"
    r"Memset|Memset2D|Memset3D|MemsetD8|MemsetD16|MemsetD32)" + API_VERSION
    + r"|^cu(MemcpyDtoH|MemcpyHtoD|MemcpyDtoD|MemcpyHtoA|MemcpyAtoH|Memcpy2D|Memcpy3D|"
    r"MemsetD8|MemsetD16|MemsetD32|MemsetD2D8|MemsetD2D16|MemsetD2D32)" + API_VERSION
)


#: The CPU frame's kinds (model.CPU_KINDS) in a reader's words.
_KIND_NOUNS = {"op": "framework operators", "python": "Python frames", "other": "other events"}


@detector(
    params=("min_blocked_pct",),
    fields=("call_count", "blocked_ms", "top_api", "top_op", "from_op"),
)
def sync_memcpy(views: Views, p: Params) -> Detection | None:
    """Synchronous memcpy/memset API calls (Nsight's cuda_memcpy_sync / cuda_memset_sync); impact
    = the host time blocked in them."""
    cpu = own_rank(views, views.cpu)
    api = cpu.filter(pl.col("kind").is_in(API_KINDS))
    if api.height == 0:
        # What the rule reads is runtime calls: say that they are missing, and what the
        # window's CPU events are instead (framework operators, Python frames).
        kinds = cpu.group_by(pl.col("kind").cast(pl.String)).len().sort(
            ["len", "kind"], descending=[True, False])
        what = ", ".join(f"{n:,} {_KIND_NOUNS.get(k, k)}" for k, n in kinds.iter_rows())
        raise NotApplicable("the analyzed window holds no CUDA/HIP runtime or driver calls"
                            + (f" (its CPU events: {what})" if what else ""))
    calls = api.filter(pl.col("name").str.contains(SYNC_COPY_API))
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
        calls.sort(pl.col("end_ns") - pl.col("start_ns"), descending=True).head(EVIDENCE_SOURCES),
        cpu,
    )
    evidence = top.select(
        "start_ns", "end_ns", pl.col("name").alias("api"), "op",
        ((pl.col("end_ns") - pl.col("start_ns")) / NS_PER_US).alias("blocked_us"),
        "source", "tid",
    )
    top_op = ops["op"][0] if ops.height else origin(views, calls["name"])
    return Detection(
        impact_ns=blocked,
        fields={
            "call_count": calls.height,
            "blocked_ms": ms(blocked),
            "top_api": apis["name"][0],
            "top_op": top_op,
            # The operator is named only where the trace records operators: elsewhere (Nsight
            # Systems) the calls named before it are all the trace says of where they came from.
            "from_op": f", from {top_op}" if records_operators(views) else "",
        },
        evidence=evidence,
    )
