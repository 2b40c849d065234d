"""The critical path of every rank of a trace, and the share of each GPU in it
(docs/critical-path.md, "Every rank and every GPU").

The graph and its path are :mod:`analysis.critical_path`'s, built per rank; this module only
runs it for each rank (not the headline alone), sums the path's segments per GPU, and reduces
the per-step breakdowns to one row per rank, the table the reports and ``traceanalyzer job``
show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceanalyzer.analysis.critical_path import CATEGORIES
from traceanalyzer.analysis.intervals import covered_between, merge

if TYPE_CHECKING:
    from traceanalyzer.analysis.critical_path import CriticalPath
    from traceanalyzer.analysis.views import Views

#: Ranks of one trace whose critical path is computed at most (the headline's first, then the
#: lowest): each costs a graph and a replay. A job's ranks are each their own trace. The same
#: bound holds for the what-ifs of the ranks' findings (:func:`every_rank`'s ``on_path``).
MAX_RANKS = 64

#: Columns of the per-(rank, step) breakdown.
STEP_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "step": pl.Int64,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "duration_ns": pl.Int64,
        **{f"{c}_ns": pl.Int64 for c in CATEGORIES},
    }
)
#: Columns of the per-(rank, step, GPU) path time.
GPU_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "step": pl.Int64,
        "device": pl.Int32,
        "path_ns": pl.Int64,
    }
)


def gpu_shares(found: CriticalPath, rank: int) -> pl.DataFrame:
    """Per step and GPU of the rank: how long the step's critical path runs on that GPU's
    streams (``path_ns``; the rest of the step is host work, or work the path does not reach)."""
    seg, steps = found.segments, found.steps
    if seg is None or seg.is_empty() or steps.is_empty():
        return pl.DataFrame(schema=GPU_SCHEMA)
    on_gpu = seg.filter(pl.col("lane").str.starts_with("gpu ")).with_columns(
        device=pl.col("lane").str.extract(r"^gpu (\d+):", 1).cast(pl.Int32)
    )
    if on_gpu.is_empty():
        return pl.DataFrame(schema=GPU_SCHEMA)
    merged = merge(on_gpu.select("device", "start_ns", "end_ns"), ["device"])
    lo, hi = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
    parts = []
    for (device,), part in merged.group_by("device", maintain_order=True):  # per GPU, not event
        covered = covered_between(part, lo, hi)
        parts.append(
            pl.DataFrame(
                {
                    "rank": np.full(len(lo), rank),
                    "step": steps["step"],
                    "device": np.full(len(lo), device),
                    "path_ns": covered,
                }
            )
        )
    return pl.concat(parts).cast(GPU_SCHEMA).sort("rank", "step", "device")


def with_rank(steps: pl.DataFrame, rank: int) -> pl.DataFrame:
    """A breakdown of :func:`critical_path.breakdown` with its rank, in :data:`STEP_SCHEMA`."""
    return steps.with_columns(rank=pl.lit(rank)).select(list(STEP_SCHEMA)).cast(STEP_SCHEMA)


def every_rank(
    views: Views,
    headline: int,
    found: CriticalPath | None,
    on_path: Callable[[int, CriticalPath], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every rank's per-step breakdown and per-GPU path time (the headline's from ``found``
    where it was computed already), at most :data:`MAX_RANKS` ranks. ``on_path(rank, path)``
    is called with each rank's path while its graph is at hand (the what-if of the rank's
    findings, analysis.whatif.predict), so that no graph is built twice or kept."""
    from traceanalyzer.analysis import critical_path

    ranks = [headline] + [r for r in views.ranks if r != headline]
    steps, gpus = [], []
    for rank in ranks[:MAX_RANKS]:  # a loop over ranks, not events
        path = found if rank == headline and found is not None else None
        path = path or critical_path.analyze(views, rank)
        if path is None:
            continue
        if on_path is not None:
            on_path(rank, path)
        steps.append(with_rank(path.steps, rank))
        gpus.append(gpu_shares(path, rank))
    if not steps:
        return pl.DataFrame(schema=STEP_SCHEMA), pl.DataFrame(schema=GPU_SCHEMA)
    return (
        pl.concat(steps).sort("rank", "step"),
        pl.concat(gpus).sort("rank", "step", "device"),
    )


def per_rank(steps: pl.DataFrame, gpus: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per rank: its steps, the mean step time, the mean per step of each kind of the
    path (``<kind>_ns``), the kind that takes most of it (``bound_by``) and, per GPU, the mean
    per step of the path on it (``gpu_path_ns``: a list of {device, path_ns})."""
    if steps.is_empty():
        schema = {
            "rank": pl.Int32,
            "steps": pl.Int64,
            "step_time_mean_ns": pl.Float64,
            **{f"{c}_ns": pl.Float64 for c in CATEGORIES},
            "bound_by": pl.String,
        }
        return pl.DataFrame(schema=schema)
    cats = [f"{c}_ns" for c in CATEGORIES]
    out = steps.group_by("rank").agg(
        steps=pl.len().cast(pl.Int64),
        step_time_mean_ns=pl.col("duration_ns").mean(),
        **{c: pl.col(c).mean() for c in cats},
    )
    names = pl.Series(list(CATEGORIES))
    largest = out.select(cats).to_numpy().argmax(axis=1)
    out = out.with_columns(bound_by=names.gather(largest))
    if gpus is not None and not gpus.is_empty():
        by_gpu = (
            gpus.group_by("rank", "device")
            .agg(pl.col("path_ns").mean())
            .sort("rank", "device")
            .group_by("rank", maintain_order=True)
            .agg(gpu_path_ns=pl.struct("device", "path_ns"))
        )
        out = out.join(by_gpu, on="rank", how="left")
    return out.sort("rank")
