"""The batch summary: one row per trace, for dashboards (``summary.parquet``, ``summary.csv``).

Rows are built from the per-trace JSON reports (or the error of a failed trace), never from live
analysis objects, so a fresh run, a re-run that skipped everything, a process-pool run and a Dask
run all give the same table. Metric columns carry the JSON schema's metric names and types;
finding counts come as ``findings_<rule slug>`` columns (dashes become underscores).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.report.jsonout import JSON_SCHEMA

#: Columns before the metrics, with their types.
BASE_COLUMNS: dict[str, pl.DataType] = {
    "path": pl.String(),
    "format": pl.String(),
    "status": pl.String(),  # "ok" or "failed"
    "error": pl.String(),
    "report": pl.String(),  # the HTML report, relative to the output folder
    "profiler": pl.String(),
    "device": pl.String(),
    "rank": pl.Int64(),
    "world_size": pl.Int64(),
    "findings": pl.Int64(),
    "worst_severity": pl.String(),
}


def metric_columns() -> dict[str, pl.DataType]:
    """The JSON schema's metrics, in its order: integers as Int64, text as String, the rest as
    Float64."""
    props = JSON_SCHEMA["properties"]["metrics"]["properties"]
    kinds = {"integer": pl.Int64(), "string": pl.String()}

    def kind(spec: dict[str, Any]) -> str:  # ["string", "null"] is text that may be missing
        types = spec.get("type")
        if isinstance(types, list):
            types = next((t for t in types if t != "null"), None)
        return str(types)

    return {name: kinds.get(kind(spec), pl.Float64()) for name, spec in props.items()}


def finding_column(slug: str) -> str:
    return "findings_" + slug.replace("-", "_")


def trace_row(path: str, fmt: str | None, doc: dict[str, Any] | None, error: str | None,
              report: str | None) -> dict[str, Any]:
    """One summary row: from a trace's JSON document, or a failed trace's error."""
    row: dict[str, Any] = {"path": path, "format": fmt, "status": "failed" if doc is None else "ok",
                           "error": error, "report": report}
    if doc is None:
        return row
    trace = doc.get("trace", {})
    devices = trace.get("devices") or []
    findings = doc.get("findings") or []
    severities = ("info", "low", "medium", "high", "critical")
    worst = max((severities.index(f["severity"]) for f in findings
                 if f.get("severity") in severities), default=None)
    row.update(
        format=trace.get("format", fmt),
        profiler=trace.get("profiler"),
        device=devices[0].get("name") if devices else None,
        rank=trace.get("rank"),
        world_size=trace.get("world_size"),
        findings=len(findings),
        worst_severity=severities[worst] if worst is not None else None,
    )
    row.update(doc.get("metrics") or {})
    counts: dict[str, int] = {finding_column(o["slug"]): 0 for o in doc.get("rule_outcomes") or []}
    for f in findings:
        col = finding_column(f["slug"])
        counts[col] = counts.get(col, 0) + 1
    row.update(counts)
    return row


def summary_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a frame with a fixed column order and types, sorted by path."""
    metrics = metric_columns()
    finding_cols = sorted({k for r in rows for k in r if k.startswith("findings_")})
    schema = {**BASE_COLUMNS, **metrics, **{c: pl.Int64() for c in finding_cols}}
    ok = {c: 0 for c in finding_cols}
    data = {name: [] for name in schema}
    for row in sorted(rows, key=lambda r: r["path"]):
        filled = {**ok, **row} if row.get("status") == "ok" else row
        for name in schema:
            data[name].append(filled.get(name))
    return pl.DataFrame(data, schema=schema)


def write_summary(frame: pl.DataFrame, out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``summary.parquet`` and ``summary.csv`` into ``out_dir`` (each atomically)."""
    from traceanalyzer.report._common import atomic_write, write_text_atomic

    out = Path(out_dir)
    parquet, csv = out / "summary.parquet", out / "summary.csv"
    atomic_write(parquet, lambda fh: frame.write_parquet(fh, statistics=False))
    write_text_atomic(csv, _no_formulas(frame).write_csv())
    return parquet, csv


def _no_formulas(frame: pl.DataFrame) -> pl.DataFrame:
    """Text cells starting with ``= + - @``, tab or CR get a leading ``'`` (the OWASP rule against
    CSV injection), so a spreadsheet shows ``=HYPERLINK(...)`` from a device name as text; control
    and bidi characters become visible escapes (``report/textsafe.py`` ``csv_safe``)."""
    from traceanalyzer.report.textsafe import csv_safe

    return csv_safe(frame)
