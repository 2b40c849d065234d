"""The nsys ingest's fast paths give the frames the plain paths give.

The fast paths: tables read on a background thread and sorted there, registered NVTX strings
looked up in SQL (one column less to read), rank of pid by a few comparisons instead of a hash
join (up to RANK_CHAIN_MAX ranks), names mapped per distinct id.
"""

from __future__ import annotations

import polars as pl
import pytest

from tests.support.nsys_fixtures import NsysBuilder
from tests.support.paths import SAMPLES
from tests.support.sqlite_engines import assert_engines_agree
from traceanalyzer.ingest.nsys import frames as nsys_frames
from traceanalyzer.ingest.nsys import read_nsys
from traceanalyzer.ingest.nsys import sqlite_columns as sqc


def test_registered_and_inline_nvtx_text(tmp_path, engine):
    b = NsysBuilder()
    b.launch("gemm", 20, 100, 1_000, 100)
    b.nvtx("forward", 0, 10_000, registered=True)
    b.nvtx("aten::mm, op_id = 1", 10, 500)
    b.nvtx("step marker", 600, None, event_type=34, registered=True)
    ann = read_nsys(b.write(tmp_path / "t.sqlite")).annotations
    assert ann.select("name", "start_ns", "end_ns").rows() == [
        ("forward", 0, 10_000), ("aten::mm, op_id = 1", 10, 500), ("step marker", 600, 600),
    ]
    assert read_nsys(tmp_path / "t.sqlite").cpu["parent_op"].to_list() == ["aten::mm"]


def test_first_nvtx_row_without_any_text(tmp_path, monkeypatch):
    """connectorx types a column computed in SQL from its first row: a first row with neither
    text nor a known string id makes that read fail, and the plain columns are read instead --
    still with connectorx, not the slow sqlite3 path."""
    b = NsysBuilder()
    b.launch("gemm", 0, 100, 1_000, 100)
    b.nvtx(None, 0, 50)
    b.nvtx("registered", 100, 200, registered=True)
    b.nvtx("inline", 300, 400)
    b.rows["NVTX_EVENTS"].append(dict(start=500, end=600, eventType=59, textId=999_999,
                                      globalTid=b.rows["NVTX_EVENTS"][0]["globalTid"]))
    path = b.write(tmp_path / "t.sqlite")
    assert_engines_agree(path, monkeypatch)
    if sqc.engine() == "connectorx":
        def no_fallback(*args, **kwargs):
            raise AssertionError("fell back to sqlite3")

        monkeypatch.setattr(sqc, "_read_sqlite3", no_fallback)
    ann = read_nsys(path).annotations
    assert ann["name"].to_list() == ["", "registered", "inline", ""]


def test_rows_written_out_of_order_come_out_sorted(tmp_path, engine):
    b = NsysBuilder()
    b.nvtx("aten::mm, op_id = 2", 6_000, 9_000)
    b.nvtx("aten::to, op_id = 1", 100, 5_000)
    b.launch("late", 6_100, 100, 7_000, 100)
    b.launch("early", 200, 100, 1_000, 100)
    b.memcpy(500, 100, 64, copy_kind=1, src=0, dst=2, cpu_start=300)
    trace = read_nsys(b.write(tmp_path / "t.sqlite"))
    for name in ("gpu", "cpu", "annotations"):
        starts = trace.frames()[name]["start_ns"]
        assert starts.is_sorted() and starts.len() > 1, name
    assert trace.gpu["name"].to_list() == ["Memcpy HtoD (Pageable -> Device)", "early", "late"]
    assert trace.cpu.select("start_ns", "parent_op").rows() == [
        (200, "aten::to"), (300, "aten::to"), (6_100, "aten::mm"),
    ]


@pytest.mark.parametrize("processes", [3, nsys_frames.RANK_CHAIN_MAX + 4])
def test_rank_of_pid_few_and_many_processes(tmp_path, engine, processes):
    b = NsysBuilder()
    pids = [1_000 - 7 * i for i in range(processes)]  # written in descending pid order
    for i, pid in enumerate(pids):
        b.launch(f"kernel_{pid}", 10 * i, 5, 10_000 + 10 * i, 5, pid=pid)
        b.nvtx(f"range_{pid}", 10 * i, 10 * i + 8, pid=pid)
    b.api("cudaGetDevice", 50, 5, pid=5_000)  # a process without GPU work: rank 0, no correlation
    trace = read_nsys(b.write(tmp_path / "t.sqlite"))
    want = {pid: rank for rank, pid in enumerate(sorted(pids))}
    gpu_ranks = dict(zip(trace.gpu["name"].str.strip_prefix("kernel_").cast(pl.Int64),
                         trace.gpu["rank"], strict=True))
    assert gpu_ranks == want
    for frame in (trace.cpu, trace.annotations):
        got = dict(frame.select("pid", "rank").unique().rows())
        assert got == {**want, **({5_000: 0} if frame is trace.cpu else {})}
    loner = trace.cpu.filter(pl.col("pid") == 5_000)
    assert loner["correlation"].to_list() == [None]
    assert trace.meta.world_size == processes


def test_ids_missing_from_string_table(tmp_path, engine):
    """Labels of unknown ids are built per distinct id: same text as before, category other."""
    b = NsysBuilder()
    b.launch("gemm_kernel", 0, 100, 1_000, 100, api="cuLaunchKernel")
    b.launch("lost", 200, 100, 2_000, 100)
    b.rows["CUPTI_ACTIVITY_KIND_KERNEL"][-1]["demangledName"] = 77_777
    b.rows["CUPTI_ACTIVITY_KIND_RUNTIME"][-1]["nameId"] = 88_888
    # Without eventClass, the kind comes from the name: driver for cu*, else runtime.
    path = b.write(tmp_path / "t.sqlite",
                   drop_columns={"CUPTI_ACTIVITY_KIND_RUNTIME": ["eventClass"]})
    trace = read_nsys(path)
    assert trace.gpu.select("name", "category").rows() == [
        ("gemm_kernel", "gemm"), ("<unknown kernel 77777>", "other"),
    ]
    assert trace.cpu.select("name", "kind").rows() == [
        ("cuLaunchKernel", "driver"), ("<unknown API 88888>", "runtime"),
    ]


@pytest.mark.skipif(sqc.engine() != "connectorx", reason="partitioned reads are connectorx's")
@pytest.mark.parametrize("export", ["gpt_step_bad", "nccl_overlap_bad_rank0"])
def test_partitioned_reads_give_the_single_query_frames(monkeypatch, export):
    """A table of 2 x PARTITION_ROWS rows or more is read in rowid ranges, side by side: the
    frames are those of one query per table (here every table is split, in ranges of 7 rows)."""
    path = SAMPLES / "nsys" / f"{export}.sqlite"
    monkeypatch.setattr(sqc, "usable_cpus", lambda: 4)
    monkeypatch.setattr(sqc, "PARTITION_ROWS", 1 << 40)
    whole = read_nsys(path)
    monkeypatch.setattr(sqc, "PARTITION_ROWS", 7)
    split = read_nsys(path)
    assert whole.gpu.height and whole.cpu.height and whole.annotations.height
    for name, frame in whole.frames().items():
        assert frame.equals(split.frames()[name]), name
