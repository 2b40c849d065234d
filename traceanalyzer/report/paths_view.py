"""The critical path per rank and per GPU as a table (analysis.path_ranks): the same rows for the
terminal (``analyze`` and ``job``), the Markdown and the HTML reports."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceanalyzer.analysis.critical_path import CATEGORIES
from traceanalyzer.report._common import fmt_ns

if TYPE_CHECKING:
    import polars as pl

    from traceanalyzer.analysis.result import AnalysisResult

#: Short column labels of the path's kinds (docs/critical-path.md, "The critical path").
SHORT = {
    "gpu_compute": "compute",
    "gpu_communication": "comm",
    "gpu_copy": "copies",
    "cpu": "CPU",
    "launch": "launch",
    "host_wait": "host wait",
    "data_loading": "data",
    "other": "other",
}
TITLE = "Critical path per rank (mean per step, as % of the step; each rank's own graph)"
GPU_LABEL = "path on each GPU"


def _pct(part: Any, whole: Any) -> str:
    return "-" if not whole or part is None else f"{100 * part / whole:.0f}%"


def path_table(frame: pl.DataFrame | None) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of :func:`analysis.path_ranks.per_rank`'s frame: rank, steps, mean step,
    the kind it is bound by, each kind's share (kinds that are zero on every rank left out), and,
    where a rank drives several GPUs, the path's share on each ("0: 52%, 1: 48%")."""
    if frame is None or frame.is_empty():
        return [], []
    kinds = [c for c in CATEGORIES if (frame[f"{c}_ns"].fill_null(0) > 0).any()]
    several = "gpu_path_ns" in frame.columns and any(
        len(v or []) > 1 for v in frame["gpu_path_ns"].to_list()
    )
    heads = ["rank", "steps", "step mean", "bound by", *(SHORT[k] for k in kinds)]
    if several:
        heads.append(GPU_LABEL)
    rows = []
    for r in frame.iter_rows(named=True):
        mean = r["step_time_mean_ns"]
        row = [str(r["rank"]), str(r["steps"]), fmt_ns(mean), SHORT[r["bound_by"]]]
        row += [_pct(r[f"{k}_ns"], mean) for k in kinds]
        if several:
            row.append(
                ", ".join(
                    f"{g['device']}: {_pct(g['path_ns'], mean)}" for g in r["gpu_path_ns"] or []
                )
            )
        rows.append(row)
    return heads, rows


def result_path_table(result: AnalysisResult) -> tuple[list[str], list[list[str]]]:
    """:func:`path_table` of an analysis, where it has several ranks or a rank drives several
    GPUs (else the headline's breakdown says it all); empty otherwise."""
    from traceanalyzer.analysis.path_ranks import per_rank

    steps = result.critical_path_ranks
    if steps is None or steps.is_empty():
        return [], []
    frame = per_rank(steps, result.critical_path_gpus)
    heads, rows = path_table(frame)
    if frame.height < 2 and GPU_LABEL not in heads:
        return [], []
    return heads, rows
