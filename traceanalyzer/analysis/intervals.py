"""Interval algebra on frames of ``start_ns``/``end_ns``: unions, lengths, overlaps, clipping.

Everything is sort + cumulative max, vectorised in Polars or NumPy; nothing loops over events.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceanalyzer.model import COLLECT_ENGINE


def merge(frame: pl.DataFrame, by: list[str] | None = None) -> pl.DataFrame:
    """The union of the intervals in ``frame`` as disjoint, sorted intervals (per ``by`` group).

    Touching intervals (one ends where the next starts) are merged.
    """
    by = by or []
    if frame.is_empty():
        return frame.select(*by, "start_ns", "end_ns").clear()
    sort_cols = [*by, "start_ns"]

    def per(expr: pl.Expr) -> pl.Expr:
        return expr.over(by) if by else expr

    # Sorted by start, an interval opens a new group when it starts after the running maximum
    # of the ends before it; a group ends at its last row, where that maximum (including the
    # row) is the group's end. Starts and ends of the groups are then two filters of the sorted
    # rows, in the same order: no group_by (a hash of every row) and no sort of its output.
    rows = (
        frame.lazy()
        .select(*by, "start_ns", "end_ns")
        .filter(pl.col("end_ns") >= pl.col("start_ns"))
        .sort(sort_cols)
        .with_columns(_reach=per(pl.col("end_ns").cum_max()))
        .with_columns(_new=per(pl.col("start_ns") > pl.col("_reach").shift(1)).fill_null(True))
        .with_columns(_last=per(pl.col("_new").shift(-1)).fill_null(True))
        .collect(engine=COLLECT_ENGINE)
    )
    starts = rows.filter("_new").select(*by, "start_ns")
    ends = rows.filter("_last").select(end_ns="_reach")
    return pl.concat([starts, ends], how="horizontal")


def total(merged: pl.DataFrame) -> int:
    """Total length of disjoint intervals."""
    if merged.is_empty():
        return 0
    return int((merged["end_ns"] - merged["start_ns"]).sum())


def union_length(frame: pl.DataFrame) -> int:
    """|union of the intervals in frame|."""
    return total(merge(frame))


def intersection_length(a: pl.DataFrame, b: pl.DataFrame) -> int:
    """|union(a) ∩ union(b)|, by inclusion-exclusion on the unions."""
    ua, ub = merge(a), merge(b)
    both = pl.concat([ua, ub]) if not ua.is_empty() and not ub.is_empty() else None
    if both is None:
        return 0
    return total(ua) + total(ub) - union_length(both)


def clip(frame: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Intervals cut to ``[start_ns, end_ns)``; those outside it are dropped."""
    return frame.with_columns(
        start_ns=pl.col("start_ns").clip(lower_bound=start_ns, upper_bound=end_ns),
        end_ns=pl.col("end_ns").clip(lower_bound=start_ns, upper_bound=end_ns),
    ).filter(pl.col("end_ns") > pl.col("start_ns"))


def covered_before(merged: pl.DataFrame, points: np.ndarray) -> np.ndarray:
    """For each time in ``points``, the covered length of ``merged`` before it."""
    if merged.is_empty():
        return np.zeros(len(points), dtype=np.int64)
    starts = merged["start_ns"].to_numpy()
    ends = merged["end_ns"].to_numpy()
    lengths = ends - starts
    before = np.concatenate([[0], np.cumsum(lengths)])
    idx = np.searchsorted(starts, points, side="right") - 1
    inside = np.where(idx >= 0, np.clip(points - starts[np.maximum(idx, 0)], 0,
                                        lengths[np.maximum(idx, 0)]), 0)
    return before[np.maximum(idx, 0)] * (idx >= 0) + inside


def covered_between(merged: pl.DataFrame, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Covered length of ``merged`` inside each window ``[starts[i], ends[i])``."""
    return covered_before(merged, ends) - covered_before(merged, starts)


def overlap_ns(
    items: pl.DataFrame, cover: pl.DataFrame, *, name: str = "overlap_ns"
) -> pl.DataFrame:
    """Add ``name``: how much of each item's [start_ns, end_ns) the union of ``cover`` overlaps,
    per rank (and per device when both frames have one)."""
    if items.height == 0 or cover.height == 0:
        return items.with_columns(pl.lit(0, dtype=pl.Int64).alias(name))
    by = [k for k in ("rank", "device") if k in items.columns and k in cover.columns]
    parts = []
    indexed = items.with_row_index("_row")
    # The cover split once by key, not filtered once per key: a job's many ranks would make that
    # ranks x rows. A null key (an unknown device) is its own part, covered by kernels of the same
    # unknown device.
    cover = cover.select(*by, "start_ns", "end_ns")
    covers = cover.partition_by(by, as_dict=True) if by else {(): cover}
    empty = cover.clear()
    for key, group in indexed.group_by(by, maintain_order=True):
        merged = merge(covers.get(tuple(key), empty))
        covered = covered_between(
            merged, group["start_ns"].to_numpy(), group["end_ns"].to_numpy()
        )
        parts.append(group.with_columns(pl.Series(name, covered, dtype=pl.Int64)))
    return pl.concat(parts).sort("_row").drop("_row")
