"""memcpy-bound: a GPU that spends most of its active time copying to or from the host."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.devices import HostLink, host_link
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    analyzed_device,
    ms,
    origin,
    own_rank,
    pct,
    window_length,
)

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

#: Copies that cross a link: host to device, device to host, host to host through the GPU, and
#: peer to peer. Device-to-device copies stay in the GPU's memory (they are HBM-bound, like an
#: elementwise kernel) and are left out.
LINK_COPIES = ("HtoD", "DtoH", "HtoH", "PtoP")
#: The directions, in words, in the order the message lists them.
DIRECTION_WORDS = {"HtoD": "host to device", "DtoH": "device to host", "HtoH": "host to host",
                   "PtoP": "peer to peer"}
#: A direction is named in the message when it has at least this share of the copy time.
MIN_DIRECTION_SHARE = 0.02
#: Copies that reach this share of the link's rate already run about as fast as they can.
NEAR_LINK_RATE = 0.7


@detector(
    params=("min_copy_share_pct", "min_impact_pct"),
    fields=("copy_ms", "busy_ms", "busy_share_pct", "copy_pct", "exposed_ms", "copy_count",
            "copy_gb", "directions", "link", "top_op", "verdict"),
)
def memcpy_bound(views: Views, p: Params) -> Detection | None:
    """Copies over the host link (or between GPUs) that take ``min_copy_share_pct`` of the GPU's
    active time and, with no kernel beside them, ``min_impact_pct`` of the window; with the
    bandwidth each direction reached against the link's."""
    window = window_length(views)
    gpu = own_rank(views, views.launches)
    if views.window and gpu.height:
        gpu = intervals.clip(gpu, *views.window)
    copies = gpu.filter(pl.col("kind") == "memcpy")
    if not window or copies.height == 0:
        return None
    if copies["copy_kind"].null_count() == copies.height:
        raise NotApplicable("the directions of copies (host to device, ...) were not recorded")
    copies = copies.filter(pl.col("copy_kind").cast(pl.String).is_in(LINK_COPIES))
    if copies.height == 0:
        return None
    by = ["rank", "device"]
    busy = intervals.total(intervals.merge(gpu.select(*by, "start_ns", "end_ns"), by=by))
    merged = intervals.merge(copies.select(*by, "start_ns", "end_ns"), by=by)
    copy_ns = intervals.total(merged)
    if not busy or pct(copy_ns, busy) < p["min_copy_share_pct"]:
        return None
    kernels = gpu.filter(pl.col("kind") == "kernel").select(*by, "start_ns", "end_ns")
    covered = intervals.overlap_ns(merged, kernels, name="covered_ns")
    exposed = copy_ns - int(covered["covered_ns"].sum() or 0)
    if pct(exposed, window) < p["min_impact_pct"]:
        return None
    link = host_link(analyzed_device(views))
    copies = copies.with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns"), _dir=pl.col("copy_kind").cast(pl.String)
    )
    ops = copies.filter(pl.col("op_name").is_not_null()).group_by("op_name").agg(
        pl.col("dur").sum()
    ).sort(["dur", "op_name"], descending=[True, False])
    evidence = copies.sort("dur", descending=True).select(
        "start_ns", "end_ns", "stream", pl.col("_dir").alias("direction"),
        pl.col("src_kind").cast(pl.String), pl.col("dst_kind").cast(pl.String), "bytes",
        (pl.col("dur") / NS_PER_US).alias("duration_us"),
        (pl.col("bytes") / pl.col("dur")).alias("gb_per_s"), pl.col("op_name").alias("op"),
    )
    return Detection(
        impact_ns=exposed,
        fields={
            "copy_ms": ms(copy_ns),
            "busy_ms": ms(busy),
            "busy_share_pct": pct(copy_ns, busy),
            "copy_pct": pct(copy_ns, window),
            "exposed_ms": ms(exposed),
            "copy_count": copies.height,
            "copy_gb": float(copies["bytes"].fill_null(0).sum()) / 1e9,
            "directions": _directions(copies, copy_ns, link),
            "verdict": _verdict(copies, link),
            "link": _link_words(link),
            "top_op": ops["op_name"][0] if ops.height else origin(views, copies["launch_name"]),
        },
        evidence=evidence,
    )


def _directions(copies: pl.DataFrame, copy_ns: int, link: HostLink) -> str:
    """Each direction's bytes and the bandwidth it reached (bytes over the time its copies were
    running, per device), against the host link's for the host directions."""
    by_dir = copies.group_by("_dir", "rank", "device").agg(
        pl.col("bytes").fill_null(0).sum().alias("bytes"),
        pl.struct("start_ns", "end_ns").alias("spans"),
    )
    parts = []
    for direction in DIRECTION_WORDS:
        rows = by_dir.filter(pl.col("_dir") == direction)
        if rows.height == 0:
            continue
        nbytes = int(rows["bytes"].sum())
        span = sum(intervals.union_length(r.struct.unnest()) for r in rows["spans"])
        if not span or span < MIN_DIRECTION_SHARE * copy_ns:
            continue
        gbps = nbytes / span  # bytes per ns = GB/s
        text = f"{DIRECTION_WORDS[direction]} {_size(nbytes)} at {gbps:.1f} GB/s"
        if direction != "PtoP":  # peer copies cross another link (NVLink or PCIe)
            text += f" ({100 * gbps / link.nominal_gbps:.0f}% of the link's {link.nominal_gbps:g} GB/s)"
        parts.append(text)
    return "; ".join(parts) if parts else "copy sizes not recorded"


def _verdict(copies: pl.DataFrame, link: HostLink) -> str:
    """Whether the host copies already run near the link's rate (then only copying less or
    hiding the copies helps) or well below it (pageable memory, small transfers)."""
    host = copies.filter(pl.col("_dir") != "PtoP", pl.col("bytes").is_not_null())
    busy = intervals.union_length(host.select("start_ns", "end_ns")) if host.height else 0
    if not busy:
        return ""
    if host["bytes"].sum() / busy >= NEAR_LINK_RATE * link.nominal_gbps:
        return ("The copies already run near the link's rate: only copying less, or hiding the "
                "copies behind compute, makes the step shorter.")
    return ("The copies run well below the link's rate: pinned memory and fewer, larger "
            "transfers would speed them up; copying less helps most.")


def _link_words(link: HostLink) -> str:
    base = (f"{link.name}, {link.nominal_gbps:g} GB/s each way, about {link.practical_gbps:g} "
            "reached from pinned memory")
    if link.assumed:
        return base + " (assumed: the trace does not say which link the GPU has)"
    return base


def _size(nbytes: int) -> str:
    """Bytes in the unit that suits them: 51.2 GB, 134 MB, 12 kB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}" if nbytes < 100 * scale else f"{nbytes / scale:.0f} {unit}"
    return f"{nbytes} B"
