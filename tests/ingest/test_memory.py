"""What the readers' memory frames share (traceanalyzer/ingest/memory.py): the operator around
an event, and memory rows from a GPU memory counter."""

from __future__ import annotations

import polars as pl

from traceanalyzer.ingest.memory import counter_memory, innermost_operator
from traceanalyzer.model import conform


def _ops(rows: list[tuple[str, int, int]], tid: int = 1) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=["name", "start_ns", "end_ns"], orient="row")
    return conform(frame.with_columns(rank=0, pid=1, tid=tid, kind=pl.lit("op")), "cpu")


def _events(times: list[int], tid: int = 1) -> pl.DataFrame:
    return pl.DataFrame({"pid": [1] * len(times), "tid": [tid] * len(times), "ts_ns": times})


def test_innermost_operator_follows_the_nesting():
    cpu = _ops(
        [
            ("outer", 0, 100),
            ("inner", 0, 50),
            ("deep", 10, 20),
            ("next", 60, 80),
            ("aten::empty", 65, 66),
        ]
    )
    # at 0 both outer and inner start: the inner one is open; at 20 deep has ended (exclusive)
    got = innermost_operator(_events([0, 15, 20, 55, 65, 100, 5]), cpu).to_list()
    assert got == ["inner", "deep", "inner", "outer", "next", None, "inner"]


def test_innermost_operator_is_per_thread():
    cpu = pl.concat([_ops([("a", 0, 100)], tid=1), _ops([("b", 0, 100)], tid=2)])
    events = pl.concat([_events([50], tid=2), _events([50], tid=1), _events([50], tid=3)])
    assert innermost_operator(events, cpu).to_list() == ["b", "a", None]


def test_gpu_memory_counter_becomes_driver_rows():
    counters = conform(
        pl.DataFrame(
            {
                "rank": [0] * 4,
                "pid": [7] * 4,
                "device": [None, None, 1, None],
                "name": ["GPU Memory", "GPU Memory", "gpu_memory", "cpu_freq"],
                "ts_ns": [10, 20, 15, 30],
                "value": [1000.0, 3000.0, 5.0, 2.0],
            }
        ),
        "counters",
    )
    mem = counter_memory(counters)
    assert mem.select("device", "ts_ns", "reserved_bytes", "bytes").rows() == [
        (0, 10, 1000, None),
        (1, 15, 5, None),
        (0, 20, 3000, 2000),
    ]
    assert mem["source"].cast(pl.String).unique().to_list() == ["driver"]
