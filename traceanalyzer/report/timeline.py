"""Data for the HTML report's per-stream GPU timeline: a few windows of the trace, size-capped.

A multi-GB trace has millions of kernels; the report embeds at most :data:`MAX_WINDOWS` windows
of at most :data:`MAX_RECTS` rectangles each. When a window holds more activity than that,
neighbouring activities on a stream closer than one "pixel" are merged into one rectangle (named
after its longest member, with a count), so the picture stays true at the drawn resolution.

Times in the output are integers relative to one origin (the analyzed window's start), because
absolute trace nanoseconds (~1e18) do not fit a JavaScript number exactly.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.model import CATEGORIES, Trace
from traceanalyzer.report._common import fmt_ns, short_kernel_name, sorted_findings

MAX_RECTS = 5000
MAX_WINDOWS = 6
MAX_GAPS = 300
MAX_MARKS_PER_FINDING = 50
MAX_NAME_CHARS = 300
#: Resolution the merging aims at: about one rectangle per pixel of a wide screen.
PIXELS = 2400
FINDING_WINDOWS = 4


def timeline_data(result: AnalysisResult, trace: Trace | None) -> dict[str, Any] | None:
    """The timeline's JSON-able payload, or None when there is no GPU activity to draw."""
    if trace is None or trace.gpu.is_empty():
        return None
    gpu = trace.gpu  # every rank the trace holds: a peer's stream explains a wait
    origin = int(result.metrics.window_start_ns or gpu["start_ns"].min())
    names = _Names()
    windows = []
    for label, w0, w1 in _choose_windows(result, gpu):
        win = _window(gpu, w0, w1, origin, names)
        if win is not None:
            win["label"] = label
            windows.append(win)
    if not windows:
        return None
    marks = []
    for i, f in enumerate(sorted_findings(result.findings)):
        for row in f.evidence[:MAX_MARKS_PER_FINDING]:
            s, e = _interval(row)
            if s is None:
                continue
            marks.append({"f": i, "s": s - origin, "e": max(e, s) - origin,
                          "label": f"{f.rule_id} {f.title}",
                          "stream": _int_or_none(row.get("stream")),
                          "device": _int_or_none(row.get("device")),
                          "rank": _int_or_none(row.get("rank", f.rank))})
    return {
        "origin_ns": origin,
        "categories": list(CATEGORIES),
        "names": names.table,
        "short": [short_kernel_name(n, 80) for n in names.table],
        "windows": windows,
        "marks": marks,
        "finding_windows": _finding_window_index(result, windows, origin),
    }


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _interval(row: dict[str, Any]) -> tuple[int | None, int]:
    s, e = row.get("start_ns"), row.get("end_ns")
    if isinstance(s, bool) or not isinstance(s, int):
        return None, 0
    if isinstance(e, bool) or not isinstance(e, int):
        e = s
    return s, e


class _Names:
    """Interns kernel names so each appears once in the payload."""

    def __init__(self) -> None:
        self.table: list[str] = []
        self._index: dict[str, int] = {}

    def ids(self, values: list[str | None]) -> list[int]:
        out = []
        for v in values:
            v = (v or "")[:MAX_NAME_CHARS]
            i = self._index.get(v)
            if i is None:
                i = self._index[v] = len(self.table)
                self.table.append(v)
            out.append(i)
        return out


def _choose_windows(result: AnalysisResult, gpu: pl.DataFrame) -> list[tuple[str, int, int]]:
    """(label, start, end) of the windows to draw: a typical step, the slowest, findings, all."""
    out: list[tuple[str, int, int]] = []
    steps = result.steps
    if steps is not None and not steps.is_empty() and {"start_ns", "end_ns"} <= set(steps.columns):
        s = steps.filter(pl.col("end_ns") > pl.col("start_ns")).with_columns(
            dur=pl.col("end_ns") - pl.col("start_ns"))
        if not s.is_empty():
            med = s["dur"].median()
            typical = s.sort((pl.col("dur") - med).abs(), "start_ns").row(0, named=True)
            out.append((f"Typical step {_step_label(typical)} ({fmt_ns(typical['dur'])})",
                        typical["start_ns"], typical["end_ns"]))
            slow = s.sort("dur", "start_ns", descending=[True, False]).row(0, named=True)
            if slow["start_ns"] != typical["start_ns"]:
                out.append((f"Slowest step {_step_label(slow)} ({fmt_ns(slow['dur'])})",
                            slow["start_ns"], slow["end_ns"]))
    for f in sorted_findings(result.findings)[:FINDING_WINDOWS]:
        rows = [_interval(r) for r in f.evidence]
        rows = [(s, e) for s, e in rows if s is not None]
        if not rows:
            continue
        s, e = rows[0]
        pad = max(3 * (e - s), 50_000)
        out.append((f"{f.rule_id} {f.title}: top occurrence", s - pad, e + pad))
    lo, hi = int(gpu["start_ns"].min()), int(gpu["end_ns"].max())
    out.append(("Whole trace", lo, hi))
    return out[:MAX_WINDOWS]


def _step_label(row: dict[str, Any]) -> str:
    return f"#{row['step']}" if row.get("step") is not None else str(row.get("name") or "")


def _window(gpu: pl.DataFrame, w0: int, w1: int, origin: int, names: _Names) -> dict | None:
    if w1 <= w0:
        return None
    acts = gpu.filter((pl.col("end_ns") > w0) & (pl.col("start_ns") < w1)).select(
        "rank", "device", "stream", "name", pl.col("category").cast(pl.String),
        pl.col("start_ns").clip(lower_bound=w0), pl.col("end_ns").clip(upper_bound=w1),
    )
    keys = ["rank", "device", "stream"]
    lanes = acts.select(keys).unique().sort(keys, nulls_last=True)
    if lanes.is_empty():
        return None
    acts = acts.join(lanes.with_row_index("lane"), on=keys, nulls_equal=True)
    many_ranks = gpu["rank"].n_unique() > 1
    res = 0
    merged = _merge(acts, res)
    while merged.height > MAX_RECTS:
        res = max(1, (w1 - w0) // PIXELS) if res == 0 else res * 4
        merged = _merge(acts, res)
    cat_index = {c: i for i, c in enumerate(CATEGORIES)}
    rects = [
        [lane, s - w0, max(e - s, 0), n, cat_index.get(c, len(CATEGORIES) - 1), k]
        for lane, s, e, n, c, k in zip(
            merged["lane"].to_list(), merged["start_ns"].to_list(), merged["end_ns"].to_list(),
            names.ids(merged["name"].to_list()), merged["category"].to_list(),
            merged["count"].to_list(), strict=True)
    ]
    return {
        "start": w0 - origin,
        "end": w1 - origin,
        "lanes": [(f"rank {r} · " if many_ranks else "") + f"GPU {d} · stream {s}"
                  for r, d, s in lanes.iter_rows()],
        "lane_keys": [[r, d, s] for r, d, s in lanes.iter_rows()],
        "rects": rects,
        "gaps": _gaps(acts, w0, w1),
        "merged_ns": res,
        "activities": acts.height,
    }


def _merge(acts: pl.DataFrame, res: int) -> pl.DataFrame:
    """Merge activities on the same lane that are closer than ``res`` ns (0: keep all)."""
    if res == 0:
        return acts.select("lane", "start_ns", "end_ns", "name", "category",
                           count=pl.lit(1, pl.UInt32)).sort("lane", "start_ns")
    return (
        acts.sort("lane", "start_ns")
        .with_columns(prev_end=pl.col("end_ns").cum_max().shift(1).over("lane"))
        .with_columns(
            grp=(pl.col("prev_end").is_null() | (pl.col("start_ns") - pl.col("prev_end") > res))
            .cum_sum().over("lane"),
            dur=pl.col("end_ns") - pl.col("start_ns"),
        )
        .group_by("lane", "grp", maintain_order=True)
        .agg(
            start_ns=pl.col("start_ns").min(),
            end_ns=pl.col("end_ns").max(),
            name=pl.col("name").sort_by("dur").last(),
            category=pl.col("category").sort_by("dur").last(),
            count=pl.len(),
        )
        .drop("grp")
    )


def _gaps(acts: pl.DataFrame, w0: int, w1: int) -> list[list[int]]:
    """The longest stretches of the window where no stream of the GPU is busy."""
    iv = acts.select("start_ns", "end_ns").sort("start_ns")
    covered = iv.with_columns(prev_end=pl.col("end_ns").cum_max().shift(1).fill_null(w0))
    gaps = covered.filter(pl.col("start_ns") > pl.col("prev_end")).select(
        s=pl.col("prev_end"), e=pl.col("start_ns"))
    tail_end = int(iv["end_ns"].max())
    if tail_end < w1:
        gaps = pl.concat([gaps, pl.DataFrame({"s": [tail_end], "e": [w1]})], how="vertical_relaxed")
    min_gap = max(1, (w1 - w0) // 2000)
    gaps = (gaps.filter(pl.col("e") - pl.col("s") >= min_gap)
            .sort(pl.col("e") - pl.col("s"), descending=True).head(MAX_GAPS).sort("s"))
    return [[s - w0, e - s] for s, e in gaps.iter_rows()]


def _finding_window_index(result: AnalysisResult, windows: list[dict[str, Any]],
                          origin: int) -> list[int | None]:
    """For each finding (report order), the window that best shows its top occurrence."""
    out: list[int | None] = []
    for f in sorted_findings(result.findings):
        spans = [_interval(r) for r in f.evidence]
        spans = [(s - origin, e - origin) for s, e in spans if s is not None]
        best = None
        if spans:
            s, e = spans[0]
            # The narrowest window that contains the occurrence: the most detail.
            fits = [(w["end"] - w["start"], i) for i, w in enumerate(windows)
                    if w["start"] <= s and e <= w["end"]]
            if fits:
                best = min(fits)[1]
        out.append(best)
    return out

