"""The trace_processor route: never without a user-named binary; SQL tables map like native ones.

No trace_processor_shell is available offline, so the SQL side is played by a stand-in object
that answers the module's queries with the tables trace_processor would return.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.support.perfetto_builder import RocprofLikeBuilder
from traceanalyzer.errors import InputError
from traceanalyzer.ingest.perfetto import TRACE_PROCESSOR_ENV, read_perfetto
from traceanalyzer.ingest.perfetto import tp as perfetto_tp


class _Result:
    def __init__(self, frame: pl.DataFrame) -> None:
        self._frame = frame

    def as_polars_dataframe(self) -> pl.DataFrame:
        return self._frame


class StandInTraceProcessor:
    """Answers the four queries of perfetto_tp with fixed tables."""

    closed = False

    def __init__(self, trace: str, bin_path: str) -> None:
        self.trace, self.bin_path = trace, bin_path

    def query(self, sql: str) -> _Result:
        tables = {
            perfetto_tp.TRACKS_SQL: pl.DataFrame(
                {
                    "uuid": [1, 2, 3, 4],
                    "parent_uuid": [None, 1, None, 1],
                    "name": [None, None, "GPU 0 stream 7", "allocated_bytes"],
                    "pid": [50, 50, None, 50],
                    "tid": [None, 51, None, None],
                    "process_name": ["python", "python", None, "python"],
                    "thread_name": [None, "main", None, None],
                    "is_counter": [0, 0, 0, 1],
                }
            ),
            perfetto_tp.SLICES_SQL: pl.DataFrame(
                {
                    "idx": [0, 1, 2, 3],
                    "ts": [100, 150, 400, 900],
                    "dur": [300, 20, 250, -1],
                    "track": [2, 2, 3, 2],
                    "name": ["aten::mm", "cudaLaunchKernel", "sm90_xmma_gemm", "unfinished"],
                    "category": ["cpu_op", "cuda_runtime", "kernel", "cpu_op"],
                    "flow": [None, 9, 9, None],
                }
            ),
            perfetto_tp.ARGS_SQL: pl.DataFrame(
                {
                    "idx": [1, 2, 2, 2],
                    "key": ["args.correlation", "debug.correlation", "debug.grid",
                            "debug.unrelated"],
                    "int_value": [77, 77, None, 1],
                    "str_value": [None, None, "[132, 1, 1]", None],
                    "real_value": [None, None, None, None],
                },
                schema_overrides={"real_value": pl.Float64},
            ),
            perfetto_tp.COUNTERS_SQL: pl.DataFrame(
                {"track": [4], "ts": [120], "value": [4096.0]}
            ),
        }
        return _Result(tables[sql])

    def close(self) -> None:
        StandInTraceProcessor.closed = True


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    binary = tmp_path / "trace_processor_shell"
    binary.write_text("#!/bin/sh\nexit 1\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    b = RocprofLikeBuilder()
    b.kernel(0, 7, 1_000, 2_000, "k", 1)
    return b.write(tmp_path / "t.pftrace")


def test_sql_tables_map_to_canonical_frames(fake_binary: Path, trace_file: Path) -> None:
    trace = perfetto_tp.read_with_trace_processor(
        trace_file, fake_binary, factory=StandInTraceProcessor
    )
    trace.validate()
    assert StandInTraceProcessor.closed
    assert trace.gpu.select("name", "device", "stream", "start_ns", "end_ns", "correlation",
                            "grid_x").row(0) == ("sm90_xmma_gemm", 0, 7, 400, 650, 77, 132)
    cpu = trace.cpu.select("name", "kind", "pid", "tid", "correlation")
    assert cpu.with_columns(pl.col("kind").cast(pl.String)).rows() == [
        ("aten::mm", "op", 50, 51, None),
        ("cudaLaunchKernel", "runtime", 50, 51, 77),
    ]
    assert trace.counters.select("pid", "name", "value").row(0) == (50, "allocated_bytes", 4096.0)
    assert any("never ended" in w for w in trace.meta.warnings)


def test_refuses_without_a_binary(trace_file: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nothing is ever downloaded"):
        perfetto_tp.read_with_trace_processor(trace_file, None)
    with pytest.raises(InputError, match="not an executable"):
        perfetto_tp.read_with_trace_processor(trace_file, tmp_path / "missing_binary")
    not_exec = tmp_path / "plain_file"
    not_exec.write_text("")
    with pytest.raises(InputError, match="not an executable"):
        perfetto_tp.read_with_trace_processor(trace_file, not_exec)


def test_native_reader_never_starts_trace_processor(
    trace_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import perfetto.trace_processor as tp_module

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("TraceProcessor must not be instantiated without a bin_path")

    monkeypatch.setattr(tp_module, "TraceProcessor", forbidden)
    monkeypatch.delenv(TRACE_PROCESSOR_ENV, raising=False)
    assert read_perfetto(trace_file).gpu.height == 1


def test_environment_variable_selects_trace_processor(
    trace_file: Path, fake_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def stand_in(trace: str, bin_path: str) -> StandInTraceProcessor:
        seen["bin_path"] = bin_path
        return StandInTraceProcessor(trace, bin_path)

    monkeypatch.setattr(perfetto_tp, "_trace_processor", stand_in)
    monkeypatch.setenv(TRACE_PROCESSOR_ENV, str(fake_binary))
    trace = read_perfetto(trace_file)
    assert seen["bin_path"] == str(fake_binary)
    assert trace.meta.extra["trace_processor"] == str(fake_binary)


def test_a_failing_binary_is_an_input_error(trace_file: Path, fake_binary: Path) -> None:
    def broken(trace: str, bin_path: str) -> None:
        raise RuntimeError("could not start")

    with pytest.raises(InputError, match="could not load"):
        perfetto_tp.read_with_trace_processor(trace_file, fake_binary, factory=broken)
