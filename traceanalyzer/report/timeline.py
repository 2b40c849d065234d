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
from traceanalyzer.report._common import fmt_ns, short_kernel_name, sorted_findings, step_span

MAX_RECTS = 5000
MAX_WINDOWS = 6
MAX_GAPS = 300
MAX_MARKS_PER_FINDING = 50
MAX_NAME_CHARS = 300
MAX_NAME_BYTES = 600_000
MAX_STEP_MARKS = 500
#: Resolution the merging aims at: about one rectangle per pixel of a wide screen.
PIXELS = 2400
FINDING_WINDOWS = 4


def timeline_data(result: AnalysisResult, trace: Trace | None) -> dict[str, Any] | None:
    """The timeline's JSON-able payload, or None when there is no GPU activity to draw."""
    if trace is None or trace.gpu.is_empty():
        return None
    gpu = trace.gpu  # every rank the trace holds: a peer's stream explains a wait
    origin = int(result.metrics.window_start_ns or gpu["start_ns"].min())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
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
    short = [short_kernel_name(n, 80) for n in names.table]
    full = names.table
    # Long C++ names are most of the payload when a window shows thousands of distinct kernels;
    # past the budget, tooltips get the shortened names too.
    if sum(map(len, full)) + sum(map(len, short)) > MAX_NAME_BYTES:
        full = short
    return {
        "steps": _step_marks(result, origin),
        "origin_ns": origin,
        "categories": list(CATEGORIES),
        "names": full,
        "short": short,
        "windows": windows,
        "marks": marks,
        "finding_windows": _finding_window_index(result, windows, origin),
    }


def _step_marks(result: AnalysisResult, origin: int) -> list[list[Any]]:
    """[start, end, label] of each step (at most MAX_STEP_MARKS), relative to the origin."""
    steps = result.steps
    if steps is None or steps.is_empty() or not {"start_ns", "end_ns"} <= set(steps.columns):
        return []
    steps = steps.sort("start_ns")
    if steps.height > MAX_STEP_MARKS:
        steps = steps.gather_every(-(-steps.height // MAX_STEP_MARKS))
    label = (pl.lit("#") + pl.col("step").cast(pl.String)) if "step" in steps.columns \
        else pl.lit("")
    rows = steps.select(s=pl.col("start_ns") - origin, e=pl.col("end_ns") - origin,
                        label=label.fill_null(""))
    return [list(r) for r in rows.iter_rows()]


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
            out.append((f"Typical {_step_label(typical)} ({fmt_ns(typical['dur'])})",
                        typical["start_ns"], typical["end_ns"]))
            slow = s.sort("dur", "start_ns", descending=[True, False]).row(0, named=True)
            if slow["start_ns"] != typical["start_ns"]:
                out.append((f"Slowest {_step_label(slow)} ({fmt_ns(slow['dur'])})",
                            slow["start_ns"], slow["end_ns"]))
    for f in sorted_findings(result.findings)[:FINDING_WINDOWS]:
        rows = [_interval(r) for r in f.evidence]
        rows = [(s, e) for s, e in rows if s is not None]
        if not rows:
            continue
        s, e = rows[0]
        pad = max(3 * (e - s), 50_000)
        out.append((f"{f.rule_id} {f.title}: top occurrence", s - pad, e + pad))
    lo, hi = int(gpu["start_ns"].min()), int(gpu["end_ns"].max())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    out.append(("Whole trace", lo, hi))
    return out[:MAX_WINDOWS]


def _step_label(row: dict[str, Any]) -> str:
    # As every report names a step: by the trace's number (ProfilerStep#12 is step 12).
    return (step_span(row["step"], row["step"]) if row.get("step") is not None
            else str(row.get("name") or "step"))


def _window(gpu: pl.DataFrame, w0: int, w1: int, origin: int, names: _Names) -> dict | None:
    if w1 <= w0:
        return None
    acts = gpu.filter((pl.col("end_ns") > w0) & (pl.col("start_ns") < w1))
    if acts.is_empty():
        return None
    # One sortable integer per (rank, device, stream); its index among the window's distinct
    # keys is the lane. Names travel as row indices until the few surviving rectangles are known.
    key = acts.select(k=pl.col("rank").cast(pl.Int64).fill_null(-1) * (1 << 48)
                      + pl.col("device").cast(pl.Int64).fill_null(-1) * (1 << 40)
                      + pl.col("stream").fill_null(-1))["k"]
    keys = key.unique().sort()
    iv = pl.DataFrame({
        "lane": keys.search_sorted(key).cast(pl.UInt32),
        "start_ns": acts["start_ns"].clip(lower_bound=w0),
        "end_ns": acts["end_ns"].clip(upper_bound=w1),
        "row": pl.int_range(acts.height, dtype=pl.UInt32, eager=True),
    })
    first = iv.select("lane").with_row_index("i").unique("lane").sort("lane")["i"]
    lanes = acts.select("rank", "device", "stream")[first]
    many_ranks = gpu["rank"].n_unique() > 1
    merged = iv.with_columns(count=pl.lit(1, pl.UInt32),
                             longest=pl.col("end_ns") - pl.col("start_ns"))
    # The merge needs each lane in start order. Ingestors usually give frames sorted by start,
    # and then every lane already is; sort (by one combined key, the cheapest sort) only if not.
    if not merged["start_ns"].is_sorted():
        merged = merged.sort("start_ns")
    res = 0
    while merged.height > MAX_RECTS:
        # Merging merged rectangles with a coarser resolution equals merging the raw activities
        # with it, so each round works on the previous round's (much smaller) output.
        res = max(1, (w1 - w0) // PIXELS) if res == 0 else res * 4
        merged = _merge(merged, res)
    rows = merged["row"]
    cat_index = {c: i for i, c in enumerate(CATEGORIES)}
    rects = [
        [lane, s - w0, max(e - s, 0), n, cat_index.get(c, len(CATEGORIES) - 1), k]
        for lane, s, e, n, c, k in zip(
            merged["lane"].to_list(), merged["start_ns"].to_list(), merged["end_ns"].to_list(),
            names.ids(acts["name"].gather(rows).to_list()),
            acts["category"].cast(pl.String).gather(rows).to_list(),
            merged["count"].to_list(), strict=True)
    ]
    return {
        "start": w0 - origin,
        "end": w1 - origin,
        "lanes": [(f"rank {r} · " if many_ranks else "") + f"GPU {d} · stream {s}"
                  for r, d, s in lanes.iter_rows()],
        "lane_keys": [[r, d, s] for r, d, s in lanes.iter_rows()],
        "rects": rects,
        "gaps": _gaps(iv, w0, w1),
        "merged_ns": res,
        "activities": acts.height,
    }


def _merge(rects: pl.DataFrame, res: int) -> pl.DataFrame:
    """Merge rectangles on the same lane less than ``res`` ns apart; a merged rectangle keeps
    the name and category of its longest activity and counts its members."""
    return (
        rects.with_columns(prev_end=pl.col("end_ns").cum_max().shift(1).over("lane"))
        .with_columns(
            grp=(pl.col("prev_end").is_null() | (pl.col("start_ns") - pl.col("prev_end") > res))
            .cum_sum().over("lane"))
        .group_by("lane", "grp", maintain_order=True)
        .agg(
            start_ns=pl.col("start_ns").min(),
            end_ns=pl.col("end_ns").max(),
            row=pl.col("row").get(pl.col("longest").arg_max()),
            count=pl.col("count").sum(),
            longest=pl.col("longest").max(),
        )
        .drop("grp")
    )


def _gaps(acts: pl.DataFrame, w0: int, w1: int) -> list[list[int]]:
    """The longest stretches of the window where no stream of the GPU is busy."""
    iv = acts.select("start_ns", "end_ns")
    if not iv["start_ns"].is_sorted():
        iv = iv.sort("start_ns")
    covered = iv.with_columns(prev_end=pl.col("end_ns").cum_max().shift(1).fill_null(w0))
    gaps = covered.filter(pl.col("start_ns") > pl.col("prev_end")).select(
        s=pl.col("prev_end"), e=pl.col("start_ns"))
    tail_end = int(iv["end_ns"].max())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
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

