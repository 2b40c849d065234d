"""The limits every read applies to the values of a trace (ingest/bounds.py, issue 30)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from traceanalyzer.ingest.bounds import (
    PLAUSIBLE_SPAN_NS,
    check_trace,
    clean_json,
    clean_text,
    small_int,
)
from traceanalyzer.model import TIME_LIMIT_NS, Device, Trace, TraceMeta, conform, empty_frame


@pytest.mark.parametrize(
    "value, expected",
    [
        (5, 5),
        ("7", 7),
        (" 8 ", 8),
        (3.0, 3),
        (3.5, None),
        (True, None),
        (None, None),
        ("yesterday", None),
        ("9" * 5000, None),
        (2**31, None),
        (-(2**31), -(2**31)),
        (b"12", 12),
        (b"\xff\x00", None),
        (float("inf"), None),
        ([1], None),
        ("", None),
    ],
)
def test_small_int(value: object, expected: int | None) -> None:
    assert small_int(value) == expected


def test_clean_text_and_json() -> None:
    assert clean_text("G\ud800PU") == "G\ufffdPU"
    assert clean_text("fine") == "fine"
    cleaned = clean_json({"a": ["\udc00", 2**70, float("nan"), b"\xff"], "\ud800": {"x": 1.5}})
    assert cleaned == {"a": ["\ufffd", None, None, "\ufffd"], "\ufffd": {"x": 1.5}}
    json.dumps(cleaned, allow_nan=False).encode("utf-8")


def _gpu(*spans: tuple[int | None, int | None]) -> pl.DataFrame:
    rows = pl.DataFrame(
        {
            "start_ns": [s for s, _ in spans],
            "end_ns": [e for _, e in spans],
            "name": ["k"] * len(spans),
            "kind": ["kernel"] * len(spans),
        },
        schema_overrides={"start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    return conform(rows, "gpu")


def _trace(gpu: pl.DataFrame, **meta: object) -> Trace:
    return Trace(
        meta=TraceMeta(path="t.json", source_format="kineto", **meta),
        gpu=gpu,  # type: ignore[arg-type]
        cpu=empty_frame("cpu"),
        annotations=empty_frame("annotations"),
        syncs=empty_frame("syncs"),
        counters=empty_frame("counters"),
    )


def test_records_beyond_the_time_limit_are_dropped_and_counted() -> None:
    trace = check_trace(
        _trace(
            _gpu(
                (0, 10),
                (None, 5),
                (5, None),
                (TIME_LIMIT_NS, TIME_LIMIT_NS),
                (-TIME_LIMIT_NS, 0),
                (-(2**63), 6),  # abs() of INT64_MIN wraps to itself: found by fuzzing
                (20, 30),
            )
        )
    )
    assert trace.gpu["start_ns"].to_list() == [0, 20]
    assert any("dropped 5 records" in w for w in trace.meta.warnings), trace.meta.warnings


def test_an_implausible_span_is_analyzed_with_a_warning() -> None:
    day = PLAUSIBLE_SPAN_NS
    trace = check_trace(_trace(_gpu((0, 10), (20, 30), (54 * 365 * day, 54 * 365 * day + 5))))
    assert trace.gpu.height == 3
    (warning,) = trace.meta.warnings
    assert "54.0 years" in warning and "separates 2 events from 1" in warning
    assert check_trace(_trace(_gpu((0, 10), (day - 10, day)))).meta.warnings == []


def test_metadata_values_are_made_safe() -> None:
    meta = dict(
        devices=[
            Device(
                id=0,
                name="G\ud800PU",
                sm_count="many",  # type: ignore[arg-type]
                memory_bytes=1e300,
                compute_capability=None,
            ),  # type: ignore[arg-type]
            Device(id=2**40),
        ],
        rank=2**40,
        world_size="x",
        time_base_ns=2**63 - 1,
        extra={"k": "\udc00", "n": 2**80},
    )
    trace = check_trace(_trace(_gpu((0, 10)), **meta))
    m = trace.meta
    assert [(d.id, d.name, d.sm_count, d.memory_bytes) for d in m.devices] == [
        (0, "G\ufffdPU", None, None)
    ]
    assert (m.rank, m.world_size, m.time_base_ns) == (0, 1, None)
    assert m.extra == {"k": "\ufffd", "n": None}
    assert any("ignored 1 devices" in w for w in m.warnings)
    json.dumps(m.to_dict(), allow_nan=False).encode("utf-8")
