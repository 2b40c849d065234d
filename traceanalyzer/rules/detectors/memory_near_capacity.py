"""memory-near-capacity: a device whose peak reserved memory comes close to its capacity (an OOM
risk, not lost time), with the fragmentation at that peak and who held the memory
(analysis.memory measures the peaks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis.memory import (
    BEFORE_WINDOW,
    OTHER_OPERATORS,
    holders_at_peak,
    memory_summary,
)
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import own_rank

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: Bytes per GB in the message (decimal, as `nvidia-smi` and the device's spec sheet give it).
BYTES_PER_GB = 1e9
#: Operators named in the message.
NAMED_HOLDERS = 3


@detector(
    params=("min_reserved_pct",),
    fields=(
        "device",
        "source",
        "peak_reserved_gb",
        "peak_reserved_pct",
        "peak_allocated_gb",
        "peak_allocated_pct",
        "capacity_gb",
        "fragmentation_gb",
        "fragmentation_pct",
        "peak_step",
        "top_holders",
    ),
)
def memory_near_capacity(views: Views, p: Params) -> Detection | None:
    """Fires when a device's peak reserved memory (the caching allocator's ``Total Reserved``, or
    what the process holds from the driver) is at least ``min_reserved_pct`` of the device's
    memory. The fragmentation is the reserved peak minus the highest allocated total while the
    reserved stood at it (allocator rows only). Informational: a risk of running out of memory, not time lost, so its impact is 0."""
    memory = own_rank(views, views.memory)
    if memory.filter(pl.col("device").is_not_null()).is_empty():
        raise NotApplicable(
            "the trace records no device memory events (torch.profiler's profile_memory=True, "
            "nsys --cuda-memory-usage=true)"
        )
    summary = memory_summary(memory, views.wall_steps, views.meta).filter(
        pl.col("peak_reserved_bytes").is_not_null()
    )
    if summary.is_empty():
        raise NotApplicable("the trace's memory events carry no reserved totals")
    known = summary.filter(pl.col("capacity_bytes").is_not_null() & (pl.col("capacity_bytes") > 0))
    if known.is_empty():
        raise NotApplicable("the trace does not give the device's memory size")
    over = known.filter(pl.col("peak_reserved_pct") >= p["min_reserved_pct"])
    if over.is_empty():
        return None
    worst = over.sort("peak_reserved_pct", descending=True).row(0, named=True)
    rank, device = worst["rank"], worst["device"]
    # The allocated total at the reserved peak: the highest of the events while the reserved
    # total stood at its peak, so the gap is what stayed unallocated all the time it did.
    at_peak = memory.filter(
        pl.col("rank") == rank,
        pl.col("device") == device,
        pl.col("source") == "allocator",
        pl.col("reserved_bytes") == worst["peak_reserved_bytes"],
    ).select(pl.col("allocated_bytes").max())
    allocated_then = at_peak.item() if worst["source"] == "allocator" else None
    reserved = int(worst["peak_reserved_bytes"])
    frag = reserved - int(allocated_then) if allocated_then is not None else None
    holders = holders_at_peak(memory, summary.filter(pl.col("device") == device)).filter(
        pl.col("rank") == rank, pl.col("device") == device
    )
    named = holders.filter(~pl.col("operator").is_in([BEFORE_WINDOW, OTHER_OPERATORS]))
    top = ", ".join(named.sort("bytes", descending=True)["operator"].head(NAMED_HOLDERS))
    at = worst["peak_reserved_ns"]
    evidence = pl.DataFrame(
        {
            "start_ns": [at],
            "end_ns": [at],
            "what": ["peak reserved memory"],
            "device": [device],
            "bytes": [reserved],
            "pct_of_device": [worst["peak_reserved_pct"]],
        }
    )
    if holders.height:
        evidence = pl.concat(
            [
                evidence,
                holders.select(
                    start_ns=pl.lit(worst["peak_allocated_ns"], pl.Int64),
                    end_ns=pl.lit(worst["peak_allocated_ns"], pl.Int64),
                    what=pl.lit("held at the allocated peak: ") + pl.col("operator"),
                    device=pl.col("device"),
                    bytes=pl.col("bytes"),
                    pct_of_device=100.0 * pl.col("bytes") / worst["capacity_bytes"],
                ),
            ],
            how="vertical_relaxed",
        )
    allocated = worst["peak_allocated_bytes"]
    return Detection(
        impact_ns=0,
        fields={
            "device": device,
            "source": worst["source"],
            "peak_reserved_gb": reserved / BYTES_PER_GB,
            "peak_reserved_pct": worst["peak_reserved_pct"],
            "peak_allocated_gb": allocated / BYTES_PER_GB if allocated is not None else None,
            "peak_allocated_pct": worst["peak_allocated_pct"],
            "capacity_gb": worst["capacity_bytes"] / BYTES_PER_GB,
            "fragmentation_gb": frag / BYTES_PER_GB if frag is not None else None,
            "fragmentation_pct": 100.0 * frag / reserved if frag is not None and reserved else None,
            "peak_step": worst["peak_reserved_step"],
            "top_holders": top or None,
        },
        evidence=evidence,
    )
