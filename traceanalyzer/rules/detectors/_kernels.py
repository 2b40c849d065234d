"""What the kernel rules share: Nsight Compute's launches judged
(:mod:`traceanalyzer.analysis.ncu`, the view ``kernel_verdicts``), the launches a rule may judge,
and how their lost time becomes the timeline's impact and evidence."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.rules.detectors import Detection, NotApplicable

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views

NO_METRICS = (
    "no Nsight Compute kernel metrics (analyze an .ncu-rep or its CSV page, or pass "
    "--kernel-metrics FILE)"
)


def judged(views: Views) -> pl.DataFrame:
    """The profiled launches judged (``views.kernel_verdicts``); not applicable without any."""
    verdicts = views.kernel_verdicts
    if verdicts.is_empty():
        raise NotApplicable(NO_METRICS)
    return verdicts


def needing(views: Views, columns: tuple[str, ...], what: str) -> pl.DataFrame:
    """:func:`candidates`, or not applicable when the page has none of ``columns`` (a details
    page shows no sector, wavefront or FLOP counts)."""
    found = candidates(views)
    all_verdicts = judged(views)
    if all(all_verdicts[col].null_count() == all_verdicts.height for col in columns):
        raise NotApplicable(
            f"the Nsight Compute page has no {what} (the details page does not "
            "show them: use the raw page or the report)"
        )
    return found


def candidates(views: Views) -> pl.DataFrame:
    """The launches a kernel rule judges: those not near their roofline."""
    return judged(views).filter(~pl.col("near_roofline"))


def impact(found: pl.DataFrame) -> int:
    """The time the timeline would save: each kernel's ``lost_ns`` (of its Nsight Compute
    duration) as a share of its timeline time."""
    share = (pl.col("lost_ns") / pl.col("duration_ns")).clip(0, 1)
    return int(found.select((share * pl.col("timeline_ns")).sum()).item() or 0)


def evidence(found: pl.DataFrame, *cols: str | pl.Expr) -> pl.DataFrame:
    """Evidence rows: the kernel, its launch, its figures, what it loses, most costly first."""
    share = (pl.col("lost_ns") / pl.col("duration_ns")).clip(0, 1)
    return (
        found.with_columns(impact_ns=(share * pl.col("timeline_ns")).cast(pl.Int64))
        .sort(["impact_ns", "lost_ns"], descending=True)
        .select(
            pl.col("name").alias("kernel"),
            pl.format("({}, {}, {})", "grid_x", "grid_y", "grid_z").alias("grid"),
            pl.format("({}, {}, {})", "block_x", "block_y", "block_z").alias("block"),
            (pl.col("duration_ns") / 1e3).alias("ncu_us"),
            *cols,
            pl.col("roofline_pct"),
            (pl.col("lost_ns") / 1e3).alias("lost_us"),
            (pl.col("timeline_ns") / 1e3).alias("timeline_us"),
            (pl.col("impact_ns") / 1e3).alias("impact_us"),
        )
    )


def fire(found: pl.DataFrame, views: Views, min_impact_pct: float) -> int | None:
    """The impact when ``found`` has a kernel and it reaches ``min_impact_pct`` of the window."""
    if found.is_empty():
        return None
    from traceanalyzer.rules.detectors._common import window_length

    lost = impact(found)
    window = window_length(views)
    if window and 100 * lost / window < min_impact_pct:
        return None
    return lost


def kernel_detection(
    found: pl.DataFrame, lost: int, ev: pl.DataFrame, top_fields: Callable[[dict[str, Any]], dict]
) -> Detection:
    """A kernel rule's detection: the kernels ``found``, their ``lost`` time, and the kernel that
    loses the most (``top_kernel``) with the rule's own figures of it (``top_fields(top)``)."""
    from traceanalyzer.rules.detectors._common import ms

    top = found.sort("lost_ns", descending=True).row(0, named=True)
    return Detection(
        impact_ns=lost,
        evidence=ev,
        fields={"kernel_count": found.height, "lost_ms": ms(lost), "top_kernel": top["function"],
                **top_fields(top)},
    )
