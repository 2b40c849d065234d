"""Cap every text field a trace holds at :data:`MAX_TEXT_CHARS`, whatever its format.

A trace's names are untrusted: one kernel name of 300 MB took 4 GB to analyze and made a 629 MB
HTML report, since a name is copied into every summary, finding and report that shows it. Every
reader's output goes through :func:`cap_text` (from :func:`traceanalyzer.ingest.read_any`), so
no frame, and no report built from one, holds a longer text. A longer value keeps its first
:data:`MAX_TEXT_CHARS` characters and gets :data:`MARKER`; how many were cut is one warning.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

from traceanalyzer.model import Trace

#: Characters of one text field at most (a kernel name, an NVTX range, a call stack). Real
#: names reach a few KB (templated CUTLASS kernels, deep Python stacks); 64 Ki is far beyond
#: them and keeps a report small for any trace.
MAX_TEXT_CHARS = 64 << 10
#: What a cut text ends with.
MARKER = "…[truncated]"


def cap_text(trace: Trace, limit: int = MAX_TEXT_CHARS) -> Trace:
    """``trace`` with every string column of its frames, its device names and its text
    metadata cut to ``limit`` characters (plus :data:`MARKER`), and a warning that counts the
    values cut. Frames with no long text are returned as they are (one ``max`` per column)."""
    cut = 0
    frames: dict[str, pl.DataFrame] = {}
    for name, frame in trace.frames().items():
        long = {
            c: int(n)
            for c in frame.columns
            if frame.schema[c] == pl.String
            if (n := _count_long(frame[c], limit))
        }
        if long:
            cut += sum(long.values())
            frame = frame.with_columns(
                pl.when(pl.col(c).str.len_chars() > limit)
                .then(pl.col(c).str.head(limit) + MARKER)
                .otherwise(pl.col(c))
                .alias(c)
                for c in long
            )
        frames[name] = frame
    meta = trace.meta
    devices = []
    for dev in meta.devices:
        if dev.name is not None and len(dev.name) > limit:
            cut += 1
            dev = dataclasses.replace(dev, name=dev.name[:limit] + MARKER)
        devices.append(dev)
    meta.devices = devices
    extra_cut, meta.extra = _cap_values(meta.extra, limit)
    cut += extra_cut
    if cut:
        meta.warnings.append(
            f"cut {cut:,} text fields longer than {limit:,} characters "
            f"(names, stacks, metadata) to that length, marked {MARKER!r}"
        )
    return dataclasses.replace(trace, meta=meta, **frames)


def _count_long(column: pl.Series, limit: int) -> int:
    # Bytes are at least characters: only a column with a long value in bytes is measured
    # in characters (the cheaper pass first).
    longest = column.str.len_bytes().max()
    if longest is None or int(longest) <= limit:  # type: ignore[arg-type]
        return 0
    return int((column.str.len_chars() > limit).sum())


def _cap_values(value: Any, limit: int) -> tuple[int, Any]:
    """(texts cut, ``value`` with each string in it cut to ``limit``) for JSON-like data."""
    if isinstance(value, str):
        return (1, value[:limit] + MARKER) if len(value) > limit else (0, value)
    if isinstance(value, dict):
        cut, out = 0, {}
        for key, item in value.items():
            n, out[key] = _cap_values(item, limit)
            cut += n
        return cut, out
    if isinstance(value, list):
        pairs = [_cap_values(item, limit) for item in value]
        return sum(n for n, _ in pairs), [item for _, item in pairs]
    return 0, value
