"""Narrowing a trace to the part a user asks about: some steps, a time window, some ranks.

Narrowing happens on the canonical frames, before any analysis, so every metric, rule and report
sees only the chosen window. Times in a time window are relative to the trace's first event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from traceanalyzer.errors import UsageError
from traceanalyzer.model import Trace

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


@dataclass(frozen=True)
class Selection:
    steps: tuple[int, int] | None = None  # inclusive range of step numbers
    time_window_ns: tuple[int, int] | None = None  # relative to the first event
    ranks: frozenset[int] | None = None

    @property
    def empty(self) -> bool:
        return self.steps is None and self.time_window_ns is None and self.ranks is None


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """``"5"`` or ``"3-7"`` (inclusive)."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if not m:
        raise UsageError(f"--steps {text!r}: expected N or FIRST-LAST, e.g. 3-7")
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else first
    if last < first:
        raise UsageError(f"--steps {text!r}: the last step comes before the first")
    return first, last


def parse_duration(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)?\s*", text)
    if not m:
        raise UsageError(f"{text!r} is not a duration such as 250ms, 1.5s or 300us")
    return int(float(m.group(1)) * _UNITS_NS[m.group(2) or "ms"])


def parse_time_window(text: str | None) -> tuple[int, int] | None:
    """``"START:END"`` with units (default ms), relative to the first event: ``"100ms:2s"``."""
    if not text:
        return None
    if ":" not in text:
        raise UsageError(f"--time-window {text!r}: expected START:END, e.g. 100ms:2s")
    start, end = (parse_duration(part) for part in text.split(":", 1))
    if end <= start:
        raise UsageError(f"--time-window {text!r}: END must be after START")
    return start, end


def parse_ranks(text: str | None) -> frozenset[int] | None:
    if not text:
        return None
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--ranks {text!r}: expected a comma-separated list such as 0,1") from None


def narrow(trace: Trace, selection: Selection) -> Trace:
    """A new trace holding only the selected ranks, steps and time window."""
    if selection.empty:
        return trace
    frames = dict(trace.frames())
    if selection.ranks is not None:
        frames = {k: f.filter(pl.col("rank").is_in(sorted(selection.ranks))) for k, f in frames.items()}
    bounds = _bounds(frames, selection)
    if bounds is not None:
        lo, hi = bounds
        gpu = frames["gpu"]
        frames = {k: _within(f, k, lo, hi) for k, f in frames.items()}
        # GPU work runs after the CPU launched it: keep what was launched inside the window
        # even when it ran after the window's end.
        launched = frames["cpu"].filter(pl.col("correlation").is_not_null()).select(
            "rank", "correlation")
        late = gpu.filter(pl.col("start_ns") >= hi).join(launched, on=["rank", "correlation"],
                                                          how="semi")
        frames["gpu"] = pl.concat([frames["gpu"], late]).sort("start_ns")
    if all(f.is_empty() for f in frames.values()) and not (trace.gpu.is_empty()
                                                           and trace.cpu.is_empty()):
        # An empty report would look like an idle GPU; say that the selection missed instead.
        ranks = sorted(set(trace.gpu["rank"].unique().to_list())
                       | set(trace.cpu["rank"].unique().to_list()))
        raise UsageError(f"--ranks/--steps/--time-window select no events of this trace (it holds "
                         f"rank {', '.join(map(str, ranks))})")
    narrowed = Trace(meta=trace.meta, **frames)
    narrowed.meta.extra["selection"] = {
        "steps": list(selection.steps) if selection.steps else None,
        "time_window_ns": list(selection.time_window_ns) if selection.time_window_ns else None,
        "ranks": sorted(selection.ranks) if selection.ranks is not None else None,
    }
    return narrowed


def _bounds(frames: dict[str, pl.DataFrame], selection: Selection) -> tuple[int, int] | None:
    lo, hi = None, None
    if selection.time_window_ns is not None:
        origin = min((int(f["start_ns" if "start_ns" in f.columns else "ts_ns"].min())
                      for f in frames.values() if not f.is_empty()), default=0)
        lo, hi = origin + selection.time_window_ns[0], origin + selection.time_window_ns[1]
    if selection.steps is not None:
        first, last = selection.steps
        steps = frames["annotations"].filter(pl.col("kind") == "step",
                                             pl.col("step").is_between(first, last))
        if steps.is_empty():
            raise UsageError(f"--steps {first}-{last}: the trace has no such ProfilerStep")
        s_lo, s_hi = int(steps["start_ns"].min()), int(steps["end_ns"].max())
        lo, hi = (s_lo, s_hi) if lo is None else (max(lo, s_lo), min(hi, s_hi))  # type: ignore[type-var]
    return None if lo is None else (lo, hi)  # type: ignore[return-value]


def _within(frame: pl.DataFrame, name: str, lo: int, hi: int) -> pl.DataFrame:
    """Events that start inside ``[lo, hi)``; they are kept whole, not clipped."""
    column = "ts_ns" if name == "counters" else "start_ns"
    return frame.filter(pl.col(column) >= lo, pl.col(column) < hi)
