"""gpus-take-turns: the GPUs of one process working one after another instead of side by
side."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, ms, own_rank, pct, window_length

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


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
    params=("min_device_share_pct", "min_impact_pct"),
    fields=("device_count", "busy_ms", "one_busy_pct", "busiest_ms", "busiest_device",
            "saving_ms", "saving_pct"),
)
def gpus_take_turns(views: Views, p: Params) -> Detection | None:
    """A rank (one process) that drives several GPUs, whose GPUs work one after another instead
    of side by side. The saving is the time any of them was busy minus the busiest one's busy
    time: what running their work concurrently would save, at best."""
    gpu = own_rank(views, views.gpu)
    if gpu["device"].n_unique() < 2:  # one GPU (most traces): nothing to sort
        return None
    merged = intervals.merge(gpu, by=["device"])
    busy = merged.group_by("device").agg(busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    # A device with a sliver of the work (a copy to it, a peer's synchronization) is not one the
    # process splits its work across. (The union of all activity is that of the devices' unions.)
    share = intervals.union_length(merged) * p["min_device_share_pct"] / 100
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
