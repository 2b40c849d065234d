"""Nsight Systems ingest on the real public exports (and the H200 samples, when present)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tests.support.paths import REPO
from traceanalyzer.ingest.nsys import read_nsys, split_by_process

PUBLIC_NSYS = REPO.parent / "shared" / "traces" / "public" / "nsys"
SAMPLE_NSYS = REPO / "sample_traces" / "nsys"


def exports() -> list[Path]:
    found = []
    for folder in (PUBLIC_NSYS, SAMPLE_NSYS):
        if folder.is_dir():
            found += sorted(folder.glob("*.sqlite"))
    return found


def sql(path: Path, query: str):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchone()
    except sqlite3.OperationalError:  # no such table: the run had no such events
        return None
    finally:
        con.close()


def test_public_exports_are_there():
    if not PUBLIC_NSYS.is_dir():
        pytest.skip("../shared/traces/public is not available")
    assert len(list(PUBLIC_NSYS.glob("*.sqlite"))) >= 3


@pytest.mark.slow
@pytest.mark.parametrize("path", exports(), ids=lambda p: p.name)
def test_export_ingests_with_exact_counts(path):
    trace = read_nsys(path)
    trace.validate()
    gpu = trace.gpu
    # Whole-graph executions (graph-level tracing) are kernel-kind activities named "[CUDA graph N]".
    is_graph = pl.col("name").str.starts_with("[CUDA graph ")
    for kind, table, rows in (
        ("kernel", "KERNEL", gpu.filter(pl.col("kind") == "kernel", ~is_graph)),
        ("graph", "GRAPH_TRACE", gpu.filter(is_graph)),
        ("memcpy", "MEMCPY", gpu.filter(pl.col("kind") == "memcpy")),
        ("memset", "MEMSET", gpu.filter(pl.col("kind") == "memset")),
    ):
        expected = sql(path, f"SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_{table}")
        count, total = expected or (0, None)
        assert rows.height == count, kind
        assert (rows["end_ns"] - rows["start_ns"]).sum() == (total or 0), kind
    runtime = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert trace.cpu.height == (runtime[0] if runtime else 0)
    nvtx = sql(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60) "
                     "AND (end IS NOT NULL OR eventType = 34)")
    assert trace.annotations.height == (nvtx[0] if nvtx else 0)
    syncs = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert trace.syncs.height == (syncs[0] if syncs else 0)
    assert trace.meta.profiler.startswith("Nsight Systems 20")
    assert not trace.gpu["name"].str.starts_with("<unknown").any()


@pytest.mark.slow
@pytest.mark.parametrize("path", exports(), ids=lambda p: p.name)
def test_runtime_join_matches_nsys_join(path):
    """Kernels find their launching call as Nsight's own reports join them:
    correlationId and the pid decoded from globalTid/globalPid."""
    trace = read_nsys(path)
    kernels = trace.gpu.filter(pl.col("kind") == "kernel")
    calls = trace.cpu.filter(pl.col("kind").is_in(["runtime", "driver"]))
    ours = kernels.join(calls, on=["rank", "correlation"], how="inner").height
    nsys = 0
    for table in ("KERNEL", "GRAPH_TRACE"):
        joined = sql(path, f"""
            SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{table} k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
            ON k.correlationId = r.correlationId
            AND ((k.globalPid >> 24) & 0xFFFFFF) = ((r.globalTid >> 24) & 0xFFFFFF)""")
        nsys += joined[0] if joined else 0
    assert ours == nsys
    # Nearly every kernel has its launch (the few that don't started before the capture).
    assert ours >= 0.95 * kernels.height
    launch_names = kernels.join(calls, on=["rank", "correlation"])["name_right"].unique()
    assert set(launch_names.to_list()) <= {
        "cudaLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel", "cudaLaunchKernelExC",
        "cudaGraphLaunch", "cudaLaunchCooperativeKernel", "cudaLaunchKernelEx", "cuGraphLaunch"}


@pytest.mark.slow
def test_two_gpu_torchrun_exports_split_into_two_ranks():
    paths = sorted(PUBLIC_NSYS.glob("nsysai_2gpu_*.sqlite"))
    if not paths:
        pytest.skip("public nsys traces not available")
    for path in paths:
        trace = read_nsys(path)
        assert trace.meta.world_size == 2
        procs = trace.meta.extra["nsys"]["processes"]
        assert [p["rank"] for p in procs] == [0, 1]
        assert procs[0]["pid"] < procs[1]["pid"]
        parts = split_by_process(trace)
        assert [p.meta.rank for p in parts] == [0, 1]
        assert sum(p.gpu.height for p in parts) == trace.gpu.height
        # torchrun's two workers, one GPU each, both running NCCL SendRecv.
        for part in parts:
            assert part.gpu["device"].n_unique() == 1
            comm = part.gpu.filter(pl.col("category") == "communication")
            assert comm["name"].str.contains("SendRecv").all() and comm.height > 0
            assert part.cpu.filter(pl.col("name") == "cudaStreamSynchronize").height > 0


@pytest.mark.slow
def test_device_info_of_the_rtx3080_export():
    path = PUBLIC_NSYS / "nsysai_rtx3080_small.sqlite"
    if not path.is_file():
        pytest.skip("public nsys traces not available")
    (dev,) = read_nsys(path).meta.devices
    assert dev.name == "NVIDIA GeForce RTX 3080"
    assert dev.sm_count == 68
    assert dev.compute_capability == "8.6"


@pytest.mark.slow
@pytest.mark.parametrize("path", exports(), ids=lambda p: p.name)
def test_time_base_puts_activity_between_capture_start_and_export(path):
    import datetime

    trace = read_nsys(path)
    start = sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    exported = sql(path, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_TIME_UTC'")
    if not start or not exported or trace.gpu.is_empty():
        pytest.skip("no session start or export time recorded")
    export_ns = int(datetime.datetime.fromisoformat(exported[0]).replace(
        tzinfo=datetime.timezone.utc).timestamp() * 1e9)
    first = trace.meta.time_base_ns + trace.gpu["start_ns"].min()
    last = trace.meta.time_base_ns + trace.gpu["end_ns"].max()
    assert start[0] <= first <= last <= export_ns + 1_000_000_000
