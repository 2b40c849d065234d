"""GPU idle gaps per stream, classified by cause as HTA does.

For each stream, GPU activities (kernels, copies, memsets) are sorted by start. Every gap between
the end of one activity and the start of the next is idle time on that stream, classified as::

    stream  ██ prev ██|<------ gap ------>|██ next ██
    CPU            launch of next: ──[call]──
                                    ^ starts after prev ended  -> host wait
    (otherwise)  gap shorter than KERNEL_WAIT_THRESHOLD_NS   -> kernel wait
    (otherwise)                                                -> other

Host wait means the GPU had nothing queued: it waited for the CPU to issue work. Kernel wait is
the short, unavoidable gap between back-to-back launches. The threshold is HTA's (30 µs).
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.model import COLLECT_ENGINE

#: HTA's threshold between "kernel wait" and "other" idle time.
KERNEL_WAIT_THRESHOLD_NS = 30_000

IDLE_CAUSES = ("host_wait", "kernel_wait", "other")

STREAM_KEYS = ["rank", "device", "stream"]
RANK_KEYS = ["rank"]


def idle_gaps(launches: pl.DataFrame, steps: pl.DataFrame | None = None,
              kernel_wait_threshold_ns: int = KERNEL_WAIT_THRESHOLD_NS,
              keys: list[str] | None = None) -> pl.DataFrame:
    """One row per gap: rank, device, stream, start_ns, end_ns, duration_ns, cause, step,
    prev_name, next_name, next_correlation, next_launch_start_ns, next_op_name.

    ``keys`` groups the activities whose gaps are measured: per stream by default (HTA's idle
    time breakdown); ``RANK_KEYS`` gives the gaps in the union of all of a rank's GPU activity,
    whose durations add up to exactly span - busy.
    """
    keys = keys or STREAM_KEYS
    # Only numbers go through the sort (a row number stands for each activity); the names of
    # the activities on either side of a gap are gathered for the gaps alone. Sorting the names
    # and operators of every activity held a copy of them for the sort's length.
    numbers = [*dict.fromkeys([*keys, *STREAM_KEYS, "start_ns", "end_ns", "correlation",
                               "launch_start_ns"])]
    gaps = (
        launches.lazy()
        .select(numbers)
        .with_row_index("_row")
        .sort([*keys, "start_ns"], maintain_order=True)
        .with_columns(
            prev_end=pl.col("end_ns").cum_max().shift(1).over(keys),
            _prev_row=pl.col("_row").shift(1).over(keys),
        )
        .filter(pl.col("prev_end").is_not_null(), pl.col("start_ns") > pl.col("prev_end"))
        .select(
            *keys,
            *(pl.col(c) for c in STREAM_KEYS if c not in keys),
            "_row",
            "_prev_row",
            start_ns="prev_end",
            end_ns="start_ns",
            duration_ns=pl.col("start_ns") - pl.col("prev_end"),
            cause=pl.when(pl.col("launch_start_ns") > pl.col("prev_end"))
            .then(pl.lit("host_wait"))
            .when(pl.col("start_ns") - pl.col("prev_end") < kernel_wait_threshold_ns)
            .then(pl.lit("kernel_wait"))
            .otherwise(pl.lit("other")),
            next_correlation="correlation",
            next_launch_start_ns="launch_start_ns",
        )
        .collect(engine=COLLECT_ENGINE)
    )
    rows, prev_rows = gaps["_row"], gaps["_prev_row"]
    gaps = gaps.select(
        pl.exclude("_row", "_prev_row", "next_correlation", "next_launch_start_ns"),
        launches["name"].gather(prev_rows).alias("prev_name"),
        launches["name"].gather(rows).alias("next_name"),
        "next_correlation",
        "next_launch_start_ns",
        launches["op_name"].gather(rows).alias("next_op_name"),
    )
    return assign_steps(gaps, steps)


def idle_by_cause() -> list[pl.Expr]:
    """Aggregations of a gaps frame into ``idle_<cause>_ns`` columns, one per cause."""
    return [pl.col("duration_ns").filter(pl.col("cause") == c).sum().alias(f"idle_{c}_ns")
            for c in IDLE_CAUSES]


def assign_steps(frame: pl.DataFrame, steps: pl.DataFrame | None, at: str = "start_ns") -> pl.DataFrame:
    """Add a ``step`` column: the step whose CPU range contains ``frame[at]`` (null if none).

    The as-of join runs on the rank, the time and the row number alone, and the step found is
    put back as a column: sorting ``frame`` itself would move every byte of every column twice
    (names, stacks)."""
    if steps is None or steps.is_empty() or frame.is_empty():
        return frame.with_columns(step=pl.lit(None, pl.Int64))
    ranges = steps.select("rank", "step", step_start="start_ns", step_end="end_ns").sort("step_start")
    keys = frame.select("rank", at).with_row_index("_row")
    if not keys[at].is_sorted():
        keys = keys.sort(at)
    found = (
        keys.join_asof(ranges, left_on=at, right_on="step_start", by="rank", strategy="backward",
                       check_sortedness=False)
        .select("_row", step=pl.when(pl.col(at) < pl.col("step_end")).then(pl.col("step")))
    )
    if not found["_row"].is_sorted():
        found = found.sort("_row")
    return frame.with_columns(found["step"])
