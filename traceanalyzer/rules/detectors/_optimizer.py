"""Optimizer steps, shared by unfused-optimizer and unfused-elementwise-chain (which leaves
them out): their host ranges, or without ranges the per-parameter Adam kernels."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors._common import kernels_of, own_rank
from traceanalyzer.texts import matches

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: Optimizer step ranges (PyTorch records ``Optimizer.step#AdamW.step``).
OPTIMIZER_RANGE = r"(?i)^optimizer\.step#|(^|[^a-z])(optimizer|opt)[_. ]?step([^a-z]|$)"
#: Kernels only an Adam/AdamW step launches, one of each per parameter when not batched.
ADAM_KERNEL = r"(?i)lerp|addcdiv|addcmul"
#: Kernels of multi-tensor (foreach) and fused optimizers: a few launches for all parameters.
BATCHED_OPTIMIZER_KERNEL = r"(?i)multi_tensor_apply|foreach|fused_adam|fusedadam|fused_sgd|_fused_|fused.*(adam|sgd|lamb)"


#: Per views: two rules and the what-if ask for the same ranges and regions, each a regular
#: expression over every host call's or kernel's name (1-3 CPU-s each at 1 GB).
_RANGES: weakref.WeakKeyDictionary[Views, pl.DataFrame] = weakref.WeakKeyDictionary()
_REGIONS: weakref.WeakKeyDictionary[Views, tuple[pl.DataFrame | None, pl.DataFrame]] = (
    weakref.WeakKeyDictionary())


def optimizer_ranges(views: Views) -> pl.DataFrame:
    """Host ranges of optimizer steps: rank, tid, name, start_ns, end_ns (once per views)."""
    cached = _RANGES.get(views)
    if cached is None:
        cached = _RANGES[views] = _optimizer_ranges(views)
    return cached


def _optimizer_ranges(views: Views) -> pl.DataFrame:
    ann = views.annotations.filter(
        pl.col("kind").is_in(["user", "nvtx"]), pl.col("name").str.contains(OPTIMIZER_RANGE)
    ).select("rank", "tid", "name", "start_ns", "end_ns")
    cpu = views.cpu.lazy().filter(
        pl.col("kind").is_in(["op", "python", "other"]), pl.col("name").str.contains(OPTIMIZER_RANGE)
    ).select("rank", "tid", "name", "start_ns", "end_ns").collect()
    return own_rank(views, pl.concat([ann, cpu])).unique(["rank", "tid", "start_ns"]).sort("start_ns")


def in_ranges(kernels: pl.DataFrame, ranges: pl.DataFrame, tag: str) -> pl.DataFrame:
    """Add ``tag``: start of the range (same rank and host thread) whose span holds the launch."""
    marks = ranges.select(
        "rank", pl.col("tid").alias("launch_tid"), pl.col("start_ns").alias(tag),
        pl.col("end_ns").alias(f"{tag}_end"),
    ).sort(tag)
    if kernels.height == 0 or marks.height == 0:
        return kernels.with_columns(pl.lit(None, pl.Int64).alias(tag),
                                    pl.lit(None, pl.Int64).alias(f"{tag}_end"))
    # Kernels with no known launch get a time before every range, so they match none. Only the
    # keys go through the sorts and the join: sorting the kernels themselves copied every column
    # (names, shapes) twice, the rule's largest allocation.
    found = (
        kernels.select("rank", "launch_tid", _at=pl.col("launch_start_ns").fill_null(-(2**62)))
        .with_row_index("_row")
        .sort("_at")
        .join_asof(marks, left_on="_at", right_on=tag, by=["rank", "launch_tid"],
                   strategy="backward", check_sortedness=False)
        .select("_row", pl.when(pl.col("_at") < pl.col(f"{tag}_end")).then(pl.col(tag)).alias(tag),
                f"{tag}_end")
        .sort("_row")
    )
    return kernels.with_columns(found[tag], found[f"{tag}_end"])


def adam_regions(views: Views) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """Without optimizer ranges (e.g. an Nsight Systems trace without NVTX for them): the GPU span,
    per step, from the first to the last per-parameter Adam kernel (lerp, addcmul, addcdiv), and
    every kernel inside it, tagged as ``_opt`` like :func:`in_ranges` does (once per views)."""
    cached = _REGIONS.get(views)
    if cached is None:
        cached = _REGIONS[views] = _adam_regions(views)
    return cached


def _adam_regions(views: Views) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    kernels = kernels_of(views)
    has_steps = views.steps.height > 0
    step = pl.col("step") if has_steps else pl.lit(0, pl.Int64).alias("step")
    kernels = kernels.with_columns(step)
    adam, batched = matches(kernels["name"], ADAM_KERNEL), matches(kernels["name"],
                                                                   BATCHED_OPTIMIZER_KERNEL)
    marks = kernels.filter(adam, ~batched, pl.col("step").is_not_null())
    if marks.height == 0:
        # a multi-tensor or fused optimizer is visible: that is the good case, not "unknown"
        return (kernels.clear() if batched.any() else None), pl.DataFrame()
    regions = marks.group_by("rank", "device", "step").agg(
        _opt=pl.col("start_ns").min(), _opt_end=pl.col("end_ns").max()
    )
    inside = kernels.join(regions, on=["rank", "device", "step"], how="inner").filter(
        pl.col("start_ns") >= pl.col("_opt"), pl.col("end_ns") <= pl.col("_opt_end")
    )
    names = regions.select(
        pl.col("_opt").alias("start_ns"),
        pl.lit("per-parameter Adam kernels (no optimizer range recorded)").alias("name"),
    )
    return inside, names
