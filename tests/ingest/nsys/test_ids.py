"""Ids of any size in an Nsight Systems export (issue 30, class 5): ids beyond Int32 within
int64 are read as they are (correlation, stream, thread and string ids are Int64 throughout);
values that are not integers within int64 (SQLite stores an integer beyond int64 as a REAL;
a forged file may hold text or blobs) and device ids or launch sizes beyond Int32 are read as
missing, and counted in a warning."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.support.nsys_fixtures import NsysBuilder
from traceanalyzer import ingest

KERNEL, RUNTIME = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"
BIG = 2**40


def _export(tmp_path: Path, *sql: str) -> Path:
    b = NsysBuilder()
    b.launch("gemm", 1000, 500, 2000, 3000)
    b.launch("relu", 1600, 500, 6000, 1000)
    b.launch("wide", 1700, 500, 8000, 1000, stream=BIG, tid=(1 << 24) - 1)
    path = b.write(tmp_path / "ids.sqlite")
    con = sqlite3.connect(path)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("engine", ["default", "connectorx", "sqlite3"])
def test_ids_beyond_int32_are_read_as_int64(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine != "default":
        monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", engine)
    path = _export(
        tmp_path,
        f"UPDATE {KERNEL} SET correlationId = {BIG} WHERE rowid = 2",
        f"UPDATE {RUNTIME} SET correlationId = {BIG} WHERE rowid = 2",
        # A string id beyond Int32: the kernel's name is found all the same.
        f"UPDATE StringIds SET id = {BIG + 5} WHERE value = 'gemm'",
        f"UPDATE {KERNEL} SET demangledName = {BIG + 5}, shortName = {BIG + 5} WHERE rowid = 1",
    )
    trace = ingest.read_any(path)
    gpu, cpu = trace.gpu.sort("start_ns"), trace.cpu.sort("start_ns")
    assert gpu["name"].to_list() == ["gemm", "relu", "wide"]
    assert gpu["correlation"].to_list() == [1, BIG, 3]
    assert cpu["correlation"].to_list() == [1, BIG, 3]  # the launch still pairs with its kernel
    assert gpu["stream"].to_list() == [7, 7, BIG]
    assert cpu["tid"].to_list() == [100, 100, (1 << 24) - 1]
    assert not [w for w in trace.meta.warnings if "ids" in w]


@pytest.mark.parametrize("engine", ["default", "connectorx", "sqlite3"])
def test_ids_beyond_int64_are_missing_and_counted(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine != "default":
        monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", engine)
    path = _export(
        tmp_path,
        # 2**66 does not fit SQLite's integers: it is stored as a REAL.
        f"UPDATE {KERNEL} SET correlationId = {2**66}, streamId = 'seven' WHERE rowid = 1",
        f"UPDATE {RUNTIME} SET correlationId = {2**66}, globalTid = x'ff' WHERE rowid = 1",
        f"UPDATE {KERNEL} SET demangledName = 1e30 WHERE rowid = 2",
        f"UPDATE {KERNEL} SET deviceId = {2**31}, gridX = {BIG}, registersPerThread = -{BIG} "
        "WHERE rowid = 3",
    )
    trace = ingest.read_any(path)
    gpu = trace.gpu.sort("start_ns")
    assert gpu.height == 3
    assert gpu["correlation"].to_list() == [None, 2, 3]
    assert gpu["stream"].to_list() == [None, 7, BIG]
    assert gpu["name"].to_list() == ["gemm", "<unknown kernel>", "wide"]  # never a null name
    assert gpu["device"].to_list() == [0, 0, None]
    assert gpu["grid_x"].to_list()[2] is None and gpu["registers"].to_list()[2] is None
    warnings = "\n".join(trace.meta.warnings)
    assert (
        "read 5 ids that are not integers within int64 (text, blobs, or numbers beyond "
        "int64) as missing: 1 in CUPTI_ACTIVITY_KIND_KERNEL.correlationId, 1 in "
        "CUPTI_ACTIVITY_KIND_KERNEL.demangledName"
    ) in warnings
    assert "and 1 more columns" in warnings
    assert "read 3 device ids, grid or block sizes or register counts beyond int32" in warnings


def test_an_export_without_missing_ids_warns_of_nothing(tmp_path: Path) -> None:
    # Id columns without a missing value are not counted: no query beyond the reads.
    trace = ingest.read_any(_export(tmp_path))
    assert trace.gpu.height == 3
    assert not [w for w in trace.meta.warnings if "ids" in w]
