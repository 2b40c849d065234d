"""Device memory (analysis.memory) on the empty_cache recordings: the peaks against the
max_memory_allocated/reserved each run measured, when they happened, and who held the memory."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.analysis.memory import (
    BEFORE_WINDOW,
    OTHER_OPERATORS,
    holders_at_peak,
    memory_summary,
)
from traceanalyzer.model import Device, TraceMeta, conform, empty_frame

PROGRAMS = Path(__file__).resolve().parents[2] / "sample_traces" / "programs"


def _record(name: str) -> dict:
    return json.loads((PROGRAMS / "records" / f"{name}.record.json").read_text())


@pytest.mark.parametrize("variant", ["bad", "good"])
def test_torch_profiler_peaks_match_the_record(variant: str):
    result = ta.analyze(
        PROGRAMS / "torch" / f"empty_cache_{variant}_torch.json.gz", use_cache=False
    )
    record = _record(f"empty_cache_{variant}_torch")
    m = result.metrics
    assert m.peak_memory_allocated_bytes == pytest.approx(record["max_memory_allocated"], rel=0.05)
    assert m.peak_memory_reserved_bytes == pytest.approx(record["max_memory_reserved"], rel=0.05)
    row = result.memory.row(0, named=True)
    assert row["source"] == "allocator" and row["peak_allocated_step"] is not None
    assert 0 < row["peak_allocated_pct"] < 5  # 2 GB of an H200's 141 GiB
    holders = result.memory_holders
    assert holders["bytes"].sum() == m.peak_memory_allocated_bytes
    named = holders.filter(~pl.col("operator").is_in([BEFORE_WINDOW, OTHER_OPERATORS]))
    assert named.height == 5 and named["operator"].str.starts_with("aten::").all()


@pytest.mark.parametrize("variant", ["bad", "good"])
def test_nsys_peak_is_the_drivers_total(variant: str):
    result = ta.analyze(PROGRAMS / "nsys" / f"empty_cache_{variant}_range.sqlite", use_cache=False)
    record = _record(f"empty_cache_{variant}_range")
    m = result.metrics
    assert m.peak_memory_allocated_bytes is None  # the driver does not see the allocator's use
    # what the process holds from the driver: the allocator's reserved and a little more
    assert record["max_memory_reserved"] <= m.peak_memory_reserved_bytes
    assert m.peak_memory_reserved_bytes == pytest.approx(record["max_memory_reserved"], rel=0.07)
    assert result.memory.row(0, named=True)["source"] == "driver"


def _allocator(rows: list[tuple[int, int, int, str | None]]) -> pl.DataFrame:
    """Rows of (ts_ns, bytes, address, operator) on device 0, with the running totals."""
    frame = pl.DataFrame(rows, schema=["ts_ns", "bytes", "address", "operator"], orient="row")
    frame = frame.with_columns(
        rank=pl.lit(0),
        device=pl.lit(0),
        source=pl.lit("allocator"),
        allocated_bytes=pl.col("bytes").cum_sum() + 1000,
        reserved_bytes=pl.lit(4000),
    )
    return conform(frame, "memory")


def test_holders_are_the_allocations_live_at_the_peak():
    mem = _allocator(
        [
            (10, 100, 1, "aten::mm"),
            (20, 200, 2, "aten::add"),
            (30, -100, 1, None),
            (40, 500, 3, "aten::mm"),
            (50, -500, 3, None),
        ]
    )
    steps = pl.DataFrame({"rank": [0], "step": [7], "start_ns": [0], "end_ns": [45]})
    meta = TraceMeta(path="x", source_format="kineto", devices=[Device(id=0, memory_bytes=16000)])
    summary = memory_summary(mem, steps, meta)
    row = summary.row(0, named=True)
    assert (row["peak_allocated_bytes"], row["peak_allocated_ns"]) == (1700, 40)
    assert row["peak_allocated_step"] == 7 and row["peak_allocated_pct"] == pytest.approx(10.625)
    held = dict(holders_at_peak(mem, summary).select("operator", "bytes").iter_rows())
    # at 40: the 200 of aten::add and the 500 of aten::mm; the first 100 was freed at 30
    assert held == {"aten::mm": 500, "aten::add": 200, BEFORE_WINDOW: 1000}


def test_no_memory_events_no_summary():
    meta = TraceMeta(path="x", source_format="kineto")
    assert memory_summary(empty_frame("memory"), pl.DataFrame(), meta).is_empty()
