"""Nsight Systems SQLite ingest on small exports built by the tests."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import polars as pl
import pytest

from tests.support.nsys_fixtures import NsysBuilder, global_pid
from tests.support.sqlite_engines import assert_engines_agree
from traceanalyzer.errors import InputError
from traceanalyzer.ingest import read_any, sniff
from traceanalyzer.ingest.nsys import read_nsys, split_by_process
from traceanalyzer.ingest.nsys import sqlite_columns as sqc


def basic_export() -> NsysBuilder:
    b = NsysBuilder()
    b.process(100, "python3")
    # The first kernel has no launch call and a NULL correlation id: a NULL-first column.
    b.launch("void prologue_kernel<float>(float*)", 0, 0, 500, 100, launched=False,
             correlationId=None)
    b.launch("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()",
             1_000, 2_000, 5_000, 1_000)
    b.launch("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 3_000, 1_500,
             6_500, 4_000, graph_node=42)
    b.launch("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096UL>)", 4_000, 1_000,
             11_000, 9_000, api="cuLaunchKernelEx", stream=9)
    b.memcpy(21_000, 2_000, 4096, copy_kind=1, src=0, dst=2)   # pageable HtoD
    b.memcpy(24_000, 1_000, 8192, copy_kind=2, src=2, dst=1)   # DtoH into pinned
    b.memset(26_000, 500, 1024, mem_kind=2)
    b.sync("cudaStreamSynchronize_v3020", 27_000, 3_000, sync_type=3, tid=101)
    b.api("cudaStreamGetCaptureInfo_v2_v11030", 31_000, 100)
    b.nvtx(None, 0, 100, event_type=75, domain=5)  # domain create: its text comes next
    b.rows["NVTX_EVENTS"][-1]["text"] = "NCCL"
    b.nvtx("ProfilerStep#3", 900, 40_000)
    b.nvtx("forward", 1_000, 20_000, registered=True)
    b.nvtx("ncclSend", 4_000, 5_000, event_type=60, domain=5)
    b.nvtx("checkpoint", 30_000, None, event_type=34)
    b.nvtx("never ended", 35_000, None, event_type=59)
    return b


@pytest.fixture
def export(tmp_path) -> Path:
    return basic_export().write(tmp_path / "basic.sqlite")


def test_frames_are_canonical_and_complete(export, engine):
    trace = read_nsys(export)
    trace.validate()
    gpu = trace.gpu
    assert gpu["kind"].value_counts().sort("kind").to_dicts() == [
        {"kind": "kernel", "count": 4}, {"kind": "memcpy", "count": 2},
        {"kind": "memset", "count": 1},
    ]
    assert gpu["start_ns"].is_sorted()
    kernels = gpu.filter(pl.col("kind") == "kernel")
    assert kernels["category"].cast(pl.String).to_list() == [
        "other", "elementwise", "gemm", "communication"]
    # NULL-first columns keep their declared integer type.
    assert kernels["correlation"].to_list() == [None, 2, 3, 4]
    assert kernels["graph_launched"].to_list() == [False, False, True, False]
    assert kernels["shared_mem"].to_list() == [3072] * 4
    assert kernels["grid_x"].to_list() == [132] * 4
    assert trace.meta.profiler == "Nsight Systems 2025.3.1.90"
    assert trace.meta.source_format == "nsys"
    # No TARGET_INFO_GPU: devices come from the activity itself.
    assert [d.id for d in trace.meta.devices] == [0]
    assert trace.meta.world_size == 1 and trace.meta.rank == 0
    assert trace.gpu["rank"].unique().to_list() == [0]


def test_copies_and_memsets(export, engine):
    gpu = read_nsys(export).gpu.filter(pl.col("kind") != "kernel")
    rows = gpu.select("name", "copy_kind", "src_kind", "dst_kind", "bytes", "category").rows()
    assert rows == [
        ("Memcpy HtoD (Pageable -> Device)", "HtoD", "pageable", "device", 4096, "memcpy"),
        ("Memcpy DtoH (Device -> Pinned)", "DtoH", "device", "pinned", 8192, "memcpy"),
        ("Memset (Device)", None, None, "device", 1024, "memset"),
    ]


def test_runtime_calls_names_kinds_and_join(export, engine):
    trace = read_nsys(export)
    cpu = trace.cpu
    names = cpu["name"].to_list()
    assert "cudaLaunchKernel" in names and "cudaLaunchKernel_v7000" not in names
    assert "cudaStreamGetCaptureInfo_v2" in names  # only the CUDA version suffix goes
    assert cpu.filter(pl.col("name") == "cuLaunchKernelEx")["kind"].to_list() == ["driver"]
    assert set(cpu.filter(pl.col("name") != "cuLaunchKernelEx")["kind"].to_list()) == {"runtime"}
    assert cpu["pid"].unique().to_list() == [100]
    assert set(cpu["tid"].to_list()) == {100, 101}
    launched = trace.gpu.join(cpu, on=["rank", "correlation"], how="inner", suffix="_api")
    assert launched.height == trace.gpu.height - 1  # all but the kernel without a launch
    assert (launched["start_ns_api"] < launched["start_ns"]).all()


def test_syncs_take_the_thread_of_their_call(export, engine):
    syncs = read_nsys(export).syncs
    assert syncs.select("sync_type", "pid", "tid", "stream").rows() == [("stream", 100, 101, 7)]


def test_nvtx_annotations(export, engine):
    trace = read_nsys(export)
    ann = trace.annotations
    assert ann.select("name", "kind", "start_ns", "end_ns", "step", "domain").rows() == [
        ("ProfilerStep#3", "step", 900, 40_000, 3, None),
        ("forward", "nvtx", 1_000, 20_000, None, None),   # text from StringIds via textId
        ("ncclSend", "nvtx", 4_000, 5_000, None, "NCCL"),  # start/end range, named domain
        ("checkpoint", "nvtx", 30_000, 30_000, None, None),  # a mark: start == end
    ]
    assert ann["pid"].unique().to_list() == [100]
    assert any("1 NVTX ranges that never ended" in w for w in trace.meta.warnings)


def test_engines_agree(export, monkeypatch):
    assert_engines_agree(export, monkeypatch)


def test_dispatch_by_sniffing(export):
    assert sniff(export) == "nsys"
    assert read_any(export).gpu.height == 7


def multi_process_export() -> NsysBuilder:
    b = NsysBuilder()
    for pid in (300, 200):  # rank order follows pid, not row order
        b.process(pid, "python3")
        for i in range(3):
            t = pid * 1_000 + i * 100
            b.launch(f"kernel_{pid}_{i}", t, 10, t + 50, 20, pid=pid, device=pid // 100 - 2)
        b.nvtx(f"step of {pid}", pid * 1_000, pid * 1_000 + 500, pid=pid)
    # A launcher process: NVTX and a CUDA call, but no GPU work. Its correlation id 1 collides
    # with the ranks' own ids.
    b.process(50, "torchrun")
    b.api("cudaGetDeviceCount_v3020", 10, 5, pid=50)
    b.nvtx("launcher", 0, 10, pid=50)
    return b


def test_processes_become_ranks_ordered_by_pid(tmp_path, engine):
    trace = read_nsys(multi_process_export().write(tmp_path / "mp.sqlite"))
    trace.validate()
    assert trace.meta.world_size == 2
    assert trace.meta.extra["nsys"]["processes"] == [
        {"pid": 200, "rank": 0, "name": "python3"}, {"pid": 300, "rank": 1, "name": "python3"}]
    by_rank = trace.gpu.group_by("rank").agg(pl.col("name").first()).sort("rank")
    assert by_rank.rows() == [(0, "kernel_200_0"), (1, "kernel_300_0")]
    # Same correlation ids in both processes: the join on (rank, correlation) keeps them apart.
    joined = trace.gpu.join(trace.cpu, on=["rank", "correlation"], suffix="_api")
    assert joined.height == 6
    assert (joined["start_ns"] - joined["start_ns_api"] == 50).all()
    launcher = trace.cpu.filter(pl.col("pid") == 50)
    assert launcher["correlation"].to_list() == [None]

    parts = split_by_process(trace)
    assert [(p.meta.rank, p.meta.world_size) for p in parts] == [(0, 2), (1, 2)]
    assert [p.gpu.height for p in parts] == [3, 3]
    assert [p.cpu["pid"].unique().to_list() for p in parts] == [[200], [300]]
    assert [p.annotations["name"].to_list() for p in parts] == [["step of 200"], ["step of 300"]]
    for part in parts:
        part.validate()


def test_single_process_split_is_identity(export):
    trace = read_nsys(export)
    assert split_by_process(trace) == [trace]


def test_rank_from_torchrun_environment(tmp_path):
    b = basic_export()
    b.rows["TARGET_INFO_SYSTEM_ENV"].append(dict(
        globalVid=1 << 48, devStateName="Local (CLI)", name="DeviceEnvironment", nameEnum=610,
        value="PATH=/usr/bin;LOCAL_RANK=1;RANK=3;WORLD_SIZE=4;MASTER_PORT=29500"))
    trace = read_nsys(b.write(tmp_path / "r3.sqlite"))
    assert (trace.meta.rank, trace.meta.world_size) == (3, 4)
    for frame in (trace.gpu, trace.cpu, trace.annotations, trace.syncs):
        assert frame["rank"].unique().to_list() == [3]


def test_device_info_from_cuda_device_table(tmp_path):
    b = basic_export()
    b.rows["TARGET_INFO_CUDA_DEVICE"].append(
        dict(gpuId=0, cudaId=0, pid=100, uuid=None, numMultiprocessors=132))
    trace = read_nsys(b.write(tmp_path / "dev.sqlite"))
    assert [(d.id, d.sm_count) for d in trace.meta.devices] == [(0, 132)]


def test_device_info_from_target_info_gpu(tmp_path):
    path = basic_export().write(tmp_path / "gpu.sqlite")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, "
                "name TEXT, totalMemory INTEGER, smCount INTEGER, computeMajor INTEGER, "
                "computeMinor INTEGER)")
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H200', 150754820096, 132, 9, 0)")
    con.commit()
    con.close()
    (dev,) = read_nsys(path).meta.devices
    assert (dev.name, dev.sm_count, dev.memory_bytes, dev.compute_capability) == (
        "NVIDIA H200", 132, 150754820096, "9.0")


def test_missing_tables_give_empty_frames(tmp_path, engine):
    b = NsysBuilder()
    b.string("unused")
    trace = read_nsys(b.write(tmp_path / "empty.sqlite"))
    trace.validate()
    assert all(frame.height == 0 for frame in trace.frames().values())
    assert any("no CUDA or NVTX events" in w for w in trace.meta.warnings)


def test_only_kernels_no_runtime_no_nvtx(tmp_path, engine):
    b = basic_export()
    trace = read_nsys(b.write(tmp_path / "k.sqlite", skip_tables=(
        "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        "PROCESSES", "META_DATA_EXPORT")))
    trace.validate()
    assert trace.gpu.height == 7 and trace.cpu.height == 0 and trace.annotations.height == 0
    assert trace.meta.profiler == "Nsight Systems"


def test_older_schema_without_optional_columns(tmp_path, engine):
    """Exports of other nsys versions lack some columns; optional ones become null."""
    b = basic_export()
    # Old syncs carried the type only in what is now deprecatedSyncType.
    for row in b.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"]:
        row["deprecatedSyncType"] = row["syncType"]
    path = b.write(tmp_path / "old.sqlite", drop_columns={
        "CUPTI_ACTIVITY_KIND_KERNEL": ["demangledName", "graphNodeId", "globalPid"],
        "CUPTI_ACTIVITY_KIND_RUNTIME": ["eventClass"],
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["syncType"],
        "NVTX_EVENTS": ["textId", "domainId"],
    })
    trace = read_nsys(path)
    trace.validate()
    kernels = trace.gpu.filter(pl.col("kind") == "kernel")
    assert kernels["name"][1] == "void at::native::vectorized_elementwise_kernel"  # shortName
    assert kernels["graph_launched"].to_list() == [False] * 4
    # Without eventClass, the name tells driver from runtime calls.
    assert trace.cpu.filter(pl.col("name") == "cuLaunchKernelEx")["kind"].to_list() == ["driver"]
    assert trace.syncs["sync_type"].to_list() == ["stream"]
    # No pids on the GPU side: the join still works on correlation alone.
    assert trace.gpu.join(trace.cpu, on=["rank", "correlation"]).height == 6


def test_not_an_nsys_export(tmp_path):
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        read_nsys(path)


def test_empty_sqlite_database(tmp_path):
    path = tmp_path / "blank.sqlite"
    sqlite3.connect(path).close()  # creates a 0-byte file
    with pytest.raises(InputError):
        read_nsys(path)


def test_garbage_with_sqlite_header(tmp_path):
    path = tmp_path / "broken.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 2000)
    with pytest.raises(InputError, match="SQLite"):
        read_nsys(path)


def test_missing_required_column(tmp_path, engine):
    path = basic_export().write(tmp_path / "renamed.sqlite",
                                drop_columns={"CUPTI_ACTIVITY_KIND_KERNEL": ["correlationId"]})
    with pytest.raises(InputError, match="CUPTI_ACTIVITY_KIND_KERNEL lacks column.*correlationId"):
        read_nsys(path)


def test_missing_both_name_columns(tmp_path):
    path = basic_export().write(tmp_path / "noname.sqlite", drop_columns={
        "CUPTI_ACTIVITY_KIND_KERNEL": ["demangledName", "shortName"]})
    with pytest.raises(InputError, match="demangledName or shortName"):
        read_nsys(path)


def test_error_is_one_line(tmp_path):
    path = basic_export().write(tmp_path / "renamed.sqlite",
                                drop_columns={"NVTX_EVENTS": ["start"]})
    with pytest.raises(InputError) as info:
        read_nsys(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_read_only_file_in_read_only_folder(tmp_path, engine):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = basic_export().write(folder / "ro.sqlite")
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        before = path.read_bytes()
        trace = read_nsys(path)
        assert trace.gpu.height == 7
        assert path.read_bytes() == before  # nothing written, no journal left behind
        assert sorted(os.listdir(folder)) == ["ro.sqlite"]
    finally:
        folder.chmod(stat.S_IRWXU)


def test_locked_database(tmp_path, monkeypatch):
    path = basic_export().write(tmp_path / "locked.sqlite")
    monkeypatch.setattr(sqc, "LOCK_TIMEOUT_S", 0.05)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(InputError, match="locked"):
            read_nsys(path)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_kernel_rows_keep_pid_only_through_rank(tmp_path):
    """Kernels with a NULL globalPid are kept, as rank 0."""
    b = basic_export()
    b.rows["CUPTI_ACTIVITY_KIND_KERNEL"][0]["globalPid"] = None
    trace = read_nsys(b.write(tmp_path / "nullpid.sqlite"))
    assert trace.gpu.filter(pl.col("kind") == "kernel").height == 4
    assert trace.gpu["rank"].unique().to_list() == [0]
    assert global_pid(100) >> 24 & 0xFFFFFF == 100


def test_tables_present_but_empty(tmp_path, engine):
    b = basic_export()
    path = b.write(tmp_path / "emptytables.sqlite")
    con = sqlite3.connect(path)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        con.execute(f"DELETE FROM {table}")
    con.commit()
    con.close()
    trace = read_nsys(path)
    trace.validate()
    assert trace.gpu["kind"].to_list() == ["memset"]
    assert trace.annotations.height == 0 and trace.syncs.height == 0
    assert trace.cpu.height > 0


def test_undecodable_text_is_replaced_not_fatal(tmp_path, engine):
    b = basic_export()
    path = b.write(tmp_path / "utf8.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(X'666f72ff77617264' AS TEXT) "
                "WHERE text = 'ncclSend'")
    con.commit()
    con.close()
    names = read_nsys(path).annotations["name"].to_list()
    assert "for\ufffdward" in names


def test_parent_op_from_pytorch_nvtx_ranges(tmp_path, engine):
    b = NsysBuilder()
    b.nvtx("FSDP::pre_forward, op_id = 1", 0, 10_000)  # a record_function range, not an op
    b.nvtx("aten::to, seq = 3, op_id = 2", 100, 5_000)
    b.nvtx("aten::copy_, op_id = 3", 200, 4_000)
    b.nvtx("aten::mm, sizes = [[8, 16], [16, 4]], op_id = 4", 6_000, 9_000)
    b.memcpy(4_500, 100, 64, copy_kind=1, src=0, dst=2, cpu_start=300)   # inside aten::copy_
    b.launch("gemm", 6_100, 100, 7_000, 100)                               # inside aten::mm
    b.launch("relu", 9_500, 100, 9_800, 100)                               # in no operator
    b.launch("other_thread", 6_200, 100, 8_000, 100, tid=555)              # another thread
    trace = read_nsys(b.write(tmp_path / "ops.sqlite"))
    rows = dict(trace.cpu.sort("start_ns").select("start_ns", "parent_op").rows())
    assert rows == {300: "aten::to", 6_100: "aten::mm", 6_200: None, 9_500: None}


def test_library_nvtx_domains_are_not_operators(tmp_path):
    b = NsysBuilder()
    b.nvtx("CCCL", 0, None, event_type=75, domain=1)
    b.rows["NVTX_EVENTS"][-1]["text"] = "CCCL"
    b.nvtx("cub::DeviceRadixSort", 100, 5_000, domain=1)
    b.launch("radix_sort_kernel", 200, 100, 1_000, 100)
    trace = read_nsys(b.write(tmp_path / "cccl.sqlite"))
    assert trace.annotations["domain"].to_list() == ["CCCL"]
    assert trace.cpu["parent_op"].to_list() == [None]


def test_through_the_parquet_cache(tmp_path):
    from traceanalyzer.ingest import load

    path = multi_process_export().write(tmp_path / "mp.sqlite")
    first = load(path, cache_dir=tmp_path / "cache")
    again = load(path, cache_dir=tmp_path / "cache")
    again.validate()
    for name, frame in first.frames().items():
        assert frame.equals(again.frames()[name]), name
    assert again.meta.extra["nsys"]["processes"] == first.meta.extra["nsys"]["processes"]
    assert [p.meta.rank for p in split_by_process(again)] == [0, 1]


def test_memory_usage_events_become_the_memory_frame(tmp_path, engine):
    b = basic_export()
    b.alloc(0, 20 << 20, 0xA000)  # before the capture range: no call, time 0
    b.alloc(2_000, 4 << 20, 0xB000, api="cudaMalloc_v3020")
    b.alloc(3_000, 1 << 20, 0xC000, api="cudaHostAlloc_v3020", mem_kind=1)  # pinned host
    b.alloc(8_000, 4 << 20, 0xB000, free=True, api="cudaFree_v3020")
    trace = read_nsys(b.write(tmp_path / "mem.sqlite"))
    trace.validate()
    mem = trace.memory
    assert mem["bytes"].to_list() == [20 << 20, 4 << 20, 1 << 20, -(4 << 20)]
    assert mem["api"].to_list() == [None, "cudaMalloc", "cudaHostAlloc", "cudaFree"]
    assert mem["device"].to_list() == [0, 0, None, 0]
    # the running total of the device's allocations; the host buffer counts on none
    assert mem["reserved_bytes"].to_list() == [20 << 20, 24 << 20, None, 20 << 20]
    assert mem["source"].cast(pl.String).unique().to_list() == ["driver"]
    assert mem["tid"].drop_nulls().len() == 3


def test_allocation_calls_without_the_memory_table(tmp_path):
    b = basic_export()
    b.api("cudaMalloc_v3020", 2_000, 300)
    b.api("cudaFree_v3020", 9_000, 800)
    mem = read_nsys(b.write(tmp_path / "calls.sqlite")).memory
    assert mem["api"].to_list() == ["cudaMalloc", "cudaFree"]
    assert mem["bytes"].null_count() == 2 and mem["ts_ns"].to_list() == [2_000, 9_000]
