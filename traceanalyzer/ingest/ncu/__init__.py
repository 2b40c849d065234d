"""Nsight Compute: per-launch kernel metrics from a ``.ncu-rep`` or its CSV pages.

:func:`read_kernel_metrics` reads the raw page (``ncu --import R --csv --page raw``, every
metric), the details page (``--page details``: the sections' figures and Nsight Compute's own
rule messages) or a report (through ``ncu``, :mod:`.rep`), plain or gzipped, recognised by
content, into the canonical ``kernel_metrics`` frame
(:data:`traceanalyzer.model.KERNEL_METRICS_SCHEMA`, docs/canonical-model.md).
:func:`read_ncu`, the reader of the format registry, makes a trace of it: the profiled launches
back to back on their streams (Nsight Compute serialises them; the gaps between them are the
profiler's, not the program's), so that ``analyze kernels.ncu-rep`` reports on them as on any
trace, with ``kernel_metrics`` in ``meta.extra`` for the kernel rules.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.ncu.csvpage import (
    RULES_SCHEMA,
    _rows,
    looks_like_page,
    page_kind,
    read_details,
    read_raw,
    read_text,
)
from traceanalyzer.ingest.ncu.rep import NCU_REP_MAGIC, export_pages
from traceanalyzer.model import Device, Trace, TraceMeta, conform, empty_trace

__all__ = [
    "KernelReport",
    "read_kernel_metrics",
    "read_ncu",
    "looks_like_page",
    "NCU_REP_MAGIC",
    "is_report",
]


@dataclass
class KernelReport:
    """What one Nsight Compute input holds."""

    path: str
    #: "raw", "details" or "ncu-rep".
    source: str
    metrics: pl.DataFrame
    #: Nsight Compute's rule messages (details page, or a report's); empty from a raw page.
    rules: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RULES_SCHEMA))
    #: Device index -> display name (raw page).
    devices: dict[int, str] = field(default_factory=dict)


def is_report(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an .ncu-rep (by its magic bytes, or its name for a gzipped one)."""
    p = Path(path)
    if p.name.endswith((".ncu-rep", ".ncu-rep.gz")):
        return True
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(p, "rb") as fh:
                head = fh.read(4)
    except (OSError, EOFError, zlib.error):
        return False
    return head == NCU_REP_MAGIC


def read_kernel_metrics(path: str | os.PathLike[str]) -> KernelReport:
    """Read an Nsight Compute input (raw or details CSV page, or a report)."""
    if is_report(path):
        raw, details = export_pages(path)
        report = _from_text(raw, path, "ncu-rep")
        if details is not None:
            report.rules = read_details(_rows(details, path), path)[1]
        return report
    return _from_text(read_text(path), path, None)


def _from_text(text: str, path: str | os.PathLike[str], source: str | None) -> KernelReport:
    rows = _rows(text, path)
    kind = page_kind(rows)
    if kind == "details":
        metrics, rules = read_details(rows, path)
        report = KernelReport(str(path), source or "details", metrics, rules)
    else:
        report = KernelReport(
            str(path), source or "raw", read_raw(rows, path), devices=_device_names(rows)
        )
    if report.metrics.is_empty():
        raise InputError(path, "is an Nsight Compute page without any profiled launch")
    return report


def _device_names(rows: list[list[str]]) -> dict[int, str]:
    header = rows[0]
    if "device__attribute_display_name" not in header or "Device" not in header:
        return {}
    name, dev = header.index("device__attribute_display_name"), header.index("Device")
    out = {}
    for row in rows[2:]:
        try:
            out[int(row[dev])] = row[name][:200]
        except ValueError:
            continue
    return out


def read_ncu(path: str | os.PathLike[str]) -> Trace:
    """A trace of the launches an Nsight Compute input profiled (see the module's doc)."""
    report = read_kernel_metrics(path)
    return report_trace(report)


def report_trace(report: KernelReport) -> Trace:
    m = report.metrics.sort("id")
    devices = []
    for dev in m["device"].drop_nulls().unique().sort().to_list():
        rows = m.filter(pl.col("device") == dev)
        sms = rows["sm_count"].drop_nulls()
        cc = rows["compute_capability"].drop_nulls()
        devices.append(
            Device(
                id=int(dev),
                name=report.devices.get(int(dev)),
                sm_count=int(sms[0]) if len(sms) else None,
                compute_capability=cc[0] if len(cc) else None,
                vendor="nvidia",
            )
        )
    meta = TraceMeta(
        path=report.path, source_format="ncu", profiler="Nsight Compute", devices=devices
    )
    # Launches back to back, in the order profiled (the ID), each as long as Nsight Compute
    # measured it; a launch without a duration takes none.
    dur = pl.col("duration_ns").fill_null(0).clip(0, 1 << 40)
    gpu = m.select(
        pl.lit(0, pl.Int32).alias("rank"),
        pl.col("device").fill_null(0),
        pl.col("stream"),
        pl.lit("kernel").alias("kind"),
        "name",
        (dur.cum_sum() - dur).alias("start_ns"),
        dur.cum_sum().alias("end_ns"),
        pl.col("id").alias("correlation"),
        *(pl.col(f"{k}_{a}") for k in ("grid", "block") for a in "xyz"),
        "registers",
        "shared_mem",
    )
    from traceanalyzer.categories import kernel_category

    gpu = gpu.with_columns(kernel_category(pl.col("name")).alias("category"))
    trace = empty_trace(meta)
    trace.gpu = conform(gpu, "gpu")
    meta.extra["kernel_metrics"] = m.to_dicts()
    meta.extra["ncu"] = {"page": report.source, "launches": m.height}
    if not report.rules.is_empty():
        meta.extra["ncu_rules"] = report.rules.to_dicts()
    return trace
