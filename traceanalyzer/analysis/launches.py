"""Launches: each GPU activity joined to the CPU call that launched it and the operator behind it."""

from __future__ import annotations

import polars as pl

from traceanalyzer.model import API_KINDS, Trace

LAUNCH_COLUMNS = ["launch_name", "launch_start_ns", "launch_end_ns", "launch_tid", "op_name",
                  "call_stack"]


def launches(trace: Trace) -> pl.DataFrame:
    """GPU activity with the launching runtime/driver call's name, times and thread, the operator
    that issued it, and ``launch_delay_ns`` = start - end of the launch call, clipped at 0 (HTA).

    The join is on (rank, correlation): correlation ids are unique within one process's trace.
    """
    calls = (
        trace.cpu.filter(pl.col("kind").is_in(API_KINDS), pl.col("correlation").is_not_null())
        .sort("start_ns")
        # Runtime and driver records can share a correlation id; the runtime call is the launch.
        .sort(pl.col("kind") != "runtime", maintain_order=True)
        .unique(["rank", "correlation"], keep="first", maintain_order=True)
        .select(
            "rank",
            "correlation",
            launch_name="name",
            launch_start_ns="start_ns",
            launch_end_ns="end_ns",
            launch_tid="tid",
            op_name="parent_op",
            call_stack="call_stack",
        )
    )
    return (
        trace.gpu.join(calls, on=["rank", "correlation"], how="left")
        .with_columns(
            launch_delay_ns=(pl.col("start_ns") - pl.col("launch_end_ns")).clip(lower_bound=0)
        )
        .sort("start_ns")
    )
