"""Steps: the repeating unit of work (a training or inference iteration) that metrics are split by.

Steps come, in order of preference, from PyTorch's ``ProfilerStep#N`` ranges, from NVTX or user
ranges whose names look like a step ("step", "iteration", "train_step", ...), or else there are
none and the whole trace is one window.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.model import Trace

#: User/NVTX range names taken as steps when the trace has no ProfilerStep#N.
STEP_NAME_PATTERN = r"(?i)^(profilerstep#?\d*|(train|training|eval|inference|decode)?[_ ]?(step|iteration|iter)\b.*)$"

STEPS_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "name": pl.String,
                "start_ns": pl.Int64, "end_ns": pl.Int64}


def find_steps(trace: Trace) -> pl.DataFrame:
    """One row per step: rank, step, name, start_ns, end_ns (CPU-side range of the step)."""
    ann = trace.annotations
    steps = ann.filter(pl.col("kind") == "step")
    if steps.is_empty():
        steps = _named_ranges(ann)
    if steps.is_empty():
        return pl.DataFrame(schema=STEPS_SCHEMA)
    return (
        steps.sort("start_ns")
        .with_columns(step=pl.coalesce("step", pl.int_range(pl.len()).cast(pl.Int64)))
        # A step range recorded twice (CPU and GPU side, or nested copies) counts once.
        .unique(["rank", "step"], keep="first", maintain_order=True)
        .select(list(STEPS_SCHEMA))
        .cast(STEPS_SCHEMA)
    )


def _named_ranges(ann: pl.DataFrame) -> pl.DataFrame:
    candidates = ann.filter(
        pl.col("kind").is_in(["user", "nvtx"]),
        pl.col("name").str.contains(STEP_NAME_PATTERN),
        pl.col("end_ns") > pl.col("start_ns"),
    )
    if candidates.height < 1:
        return candidates
    # The most frequent matching name is the step; other matches are usually sub-ranges.
    name = candidates.group_by("name").len().sort(["len", "name"], descending=[True, False])["name"][0]
    return candidates.filter(pl.col("name") == name).with_columns(step=pl.lit(None, pl.Int64))


def with_wall_times(steps: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Add when each step's GPU work ran and the step's wall-clock range.

    A step annotation is a CPU-side range: the CPU queues the step's work and moves on, so the
    range can end long before the GPU finishes (a GPU-bound loop), or the GPU can wait on it (a
    CPU-bound loop). What a user measures with CUDA events is the cadence of completions, so:

    - ``gpu_start_ns``/``gpu_end_ns``: first start and last end of the GPU work launched in the step;
    - ``wall_end_ns`` = max(CPU end, GPU end): when the step is complete;
    - ``wall_start_ns`` = the previous step's ``wall_end_ns`` (for the first step, the earlier of
      its CPU and GPU starts), so consecutive steps tile the timeline and
      ``wall_end_ns - wall_start_ns`` is the step time.
    """
    gpu = (
        launches.filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(gpu_start_ns=pl.col("start_ns").min(), gpu_end_ns=pl.col("end_ns").max())
    )
    return (
        steps.join(gpu, on=["rank", "step"], how="left")
        .sort("rank", "start_ns")
        .with_columns(wall_end_ns=pl.max_horizontal("end_ns", "gpu_end_ns"))
        .with_columns(
            wall_start_ns=pl.coalesce(
                pl.col("wall_end_ns").shift(1).over("rank"),
                pl.min_horizontal("start_ns", "gpu_start_ns"),
            )
        )
        # Overlapping step annotations (nested or duplicated) must not give negative times.
        .with_columns(wall_start_ns=pl.min_horizontal("wall_start_ns", "wall_end_ns"))
    )
