"""Kineto ingest on real public traces and on small traces built here."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from tests.support.kineto_builder import KinetoBuilder
from tests.support.kineto_reference import reference_read
from tests.support.paths import public_kineto
from tests.support.texts import text_data_bytes
from traceanalyzer.errors import InputError
from traceanalyzer.ingest import load, sniff
from traceanalyzer.ingest.kineto import read_kineto


@pytest.mark.slow
@pytest.mark.parametrize("path", public_kineto(), ids=lambda p: p.name)
def test_public_trace_matches_reference_parser(path):
    fast, slow = read_kineto(path), reference_read(path)
    fast.validate()
    assert "read_twice" not in fast.meta.extra  # the layout (or its guess) held
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name
    # Kernel counts agree with a plain count of the JSON.
    with gzip.open(path, "rb") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    n_kernels = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")
    assert fast.gpu.filter(pl.col("kind") == "kernel").height == n_kernels


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in public_kineto() if p.stat().st_size > 400_000][:3],
                         ids=lambda p: p.name)
def test_many_groups_and_columnwise_sort_match_reference_parser(path, monkeypatch):
    """Small traces take one reduction and one query per frame; big ones many reductions (text
    as categories) and a sort a few columns at a time. Forced here on real traces, they must give
    exactly the reference frames too."""
    from traceanalyzer.ingest.kineto import assemble, jsonscan, reader

    monkeypatch.setattr(jsonscan, "DEFAULT_CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(jsonscan, "FIRST_READ_BYTES", 16 << 10)
    monkeypatch.setattr(reader, "FIRST_GROUP_BYTES", 64 << 10)
    monkeypatch.setattr(reader, "GROUP_BYTES", 64 << 10)
    monkeypatch.setattr(assemble, "COLUMNWISE_ROWS", 0)
    reduced = []
    real_reduce = reader._reduce_group
    monkeypatch.setattr(reader, "_reduce_group", lambda chunks, compact: reduced.append(compact)
                        or real_reduce(chunks, compact))
    fast = read_kineto(path)
    assert len(reduced) > 2 and all(reduced)
    slow = reference_read(path)
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in public_kineto() if p.stat().st_size > 400_000][:2],
                         ids=lambda p: p.name)
def test_a_big_trace_keeps_one_copy_of_each_text(path, monkeypatch):
    """Read in many groups (its text as categories) and sorted a column at a time, as a big
    trace is, the frames' text columns hold each distinct text once, not once per row."""
    from traceanalyzer.ingest.kineto import assemble, jsonscan, reader

    monkeypatch.setattr(jsonscan, "DEFAULT_CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(reader, "FIRST_GROUP_BYTES", 64 << 10)
    monkeypatch.setattr(reader, "GROUP_BYTES", 64 << 10)
    monkeypatch.setattr(assemble, "COLUMNWISE_ROWS", 0)
    trace = read_kineto(path)
    for frame, col in (("cpu", "name"), ("cpu", "input_dims"), ("cpu", "parent_op"),
                       ("gpu", "name")):
        column = getattr(trace, frame)[col]
        distinct = int(column.drop_nulls().unique().str.len_bytes().sum() or 0)
        every_row = int(column.str.len_bytes().sum() or 0)
        assert text_data_bytes(column) <= distinct + 64, (frame, col)
        if col == "name":  # the trace repeats its names: stored per row, they would not fit
            assert distinct < every_row / 4, (frame, col)


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in public_kineto() if p.stat().st_size > 400_000][:3],
                         ids=lambda p: p.name)
def test_big_trace_frames_equal_the_small_trace_frames(path, monkeypatch):
    """Big traces build the CPU frame a few columns at a time and the GPU frame on its own;
    small ones both frames in one query. Either way, the frames are the same."""
    from traceanalyzer.ingest.kineto import assemble

    small = read_kineto(path)
    monkeypatch.setattr(assemble, "COLUMNWISE_ROWS", 0)
    big = read_kineto(path)
    for name, frame in small.frames().items():
        assert frame.equals(big.frames()[name]), name
    assert small.meta.extra == big.meta.extra and small.meta.warnings == big.meta.warnings


@pytest.mark.parametrize("columnwise", [False, True])
def test_graph_launched_follows_the_first_launch_call_in_time(tmp_path, kineto, monkeypatch,
                                                              columnwise):
    """A kernel's graph_launched comes from its launch call (by correlation id); when two calls
    carry the same id, the earlier one in time decides, whatever their order in the file."""
    from traceanalyzer.ingest.kineto import assemble

    if columnwise:
        monkeypatch.setattr(assemble, "COLUMNWISE_ROWS", 0)
    # Each kernel's id has a second call, later in the file but earlier in time, which decides.
    graph_later = kineto.launch("plain_first", 10, 2, 20, 5, api="cudaGraphLaunch")
    plain_later = kineto.launch("graph_first", 30, 2, 40, 5)
    for corr, api, ts in ((graph_later, "cudaLaunchKernel", 5), (plain_later, "cudaGraphLaunch", 25)):
        kineto.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 1, "tid": 2,
                              "ts": ts, "dur": 1, "args": {"correlation": corr}})
    orphan = kineto.launch("no_call", 50, 2, 60, 5)
    kineto.events = [e for e in kineto.events
                     if not (e["cat"] == "cuda_runtime" and e["args"]["correlation"] == orphan)]
    trace = read_kineto(kineto.write(tmp_path / "t.json"))
    flags = dict(trace.gpu.select("name", "graph_launched").iter_rows())
    assert flags == {"plain_first": False, "graph_first": True, "no_call": None}
    assert trace.meta.extra["gpu_without_launch"] == 1


def test_units_and_links(tmp_path, kineto):
    kineto.step(1, 0, 100)
    kineto.op("aten::mm", 10, 20, ext=5, **{"Input Dims": [[8, 16], [16, 32]],
                                           "Input type": ["float", "float"]})
    kineto.launch("ampere_sgemm_64x64_nn", 12.5, 3.25, 40.001, 10.5, ext=5)
    trace = read_kineto(kineto.write(tmp_path / "t.json"))
    trace.validate()
    k = trace.gpu.row(0, named=True)
    assert (k["start_ns"], k["end_ns"]) == (40_001, 50_501)
    assert k["category"] == "gemm" and k["grid_x"] == 132 and k["device"] == 0
    rt = trace.cpu.filter(pl.col("kind") == "runtime").row(0, named=True)
    assert rt["correlation"] == k["correlation"] and rt["parent_op"] == "aten::mm"
    op = trace.cpu.filter(pl.col("kind") == "op").row(0, named=True)
    assert json.loads(op["input_dims"]) == [[8, 16], [16, 32]]
    assert trace.annotations.filter(pl.col("kind") == "step")["step"].to_list() == [1]
    assert trace.meta.devices[0].sm_count == 132


def test_ns_floats_are_exact(tmp_path, kineto):
    kineto.launch("k", 4203669603771.0, 1.0, 4203669603771.648, 6.88)
    k = read_kineto(kineto.write(tmp_path / "t.json")).gpu.row(0, named=True)
    assert k["start_ns"] == 4203669603771648
    assert k["end_ns"] - k["start_ns"] == 6880


def test_string_and_empty_pids(tmp_path, kineto):
    kineto.launch("k", 1, 1, 2, 1)
    kineto.events.append({"ph": "X", "cat": "cpu_op", "name": "x", "pid": "Spans", "tid": "",
                          "ts": 1, "dur": 1})
    kineto.events.append({"ph": "M", "name": "process_name", "pid": "", "args": {"name": "x"}})
    trace = read_kineto(kineto.write(tmp_path / "t.json"))
    assert trace.cpu.filter(pl.col("name") == "x")["pid"].to_list() == [None]


def test_memcpy_kinds(tmp_path, kineto):
    kineto.launch("Memcpy HtoD (Pageable -> Device)", 1, 5, 10, 5, cat="gpu_memcpy",
                  api="cudaMemcpyAsync", bytes=4096)
    g = read_kineto(kineto.write(tmp_path / "t.json")).gpu.row(0, named=True)
    assert (g["kind"], g["copy_kind"], g["src_kind"], g["dst_kind"], g["bytes"]) == (
        "memcpy", "HtoD", "pageable", "device", 4096)


@pytest.mark.slow
def test_truncated_real_trace_keeps_complete_events(tmp_path, public_dir):
    src = public_dir / "kineto" / "hta_alexnet_sync.json.gz"
    data = gzip.decompress(src.read_bytes())
    full = read_kineto(src)
    for fraction in (0.3, 0.6, 0.95):
        cut = tmp_path / f"cut{fraction}.json"
        cut.write_bytes(data[: int(len(data) * fraction)])
        trace = read_kineto(cut)
        assert any("truncated" in w for w in trace.meta.warnings)
        assert 0 < trace.cpu.height <= full.cpu.height
        # Every event kept is a complete event of the original.
        # (parent_op is derived from other events, so it is left out of the comparison.)
        cols = [c for c in full.cpu.columns if c != "parent_op"]
        assert trace.cpu.join(full.cpu, on=cols, how="anti", nulls_equal=True).is_empty()
    # A truncated gzip stream keeps what it holds too.
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    trace = read_kineto(gz)
    assert trace.meta.warnings and trace.cpu.height > 0


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "is empty"),
        (b"\x00\x01garbage\xff", "is not a trace"),
        (b'{"hello": "world"}', "no traceEvents"),
        (b"\x1f\x8b\x08\x00garbage-gzip", "gzip"),
    ],
)
def test_bad_inputs_raise_input_error(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(InputError, match=problem) as info:
        load(path, use_cache=False)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="directory"):
        sniff(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        sniff(tmp_path / "nope.json")


def test_wrong_extension_is_sniffed_by_content(tmp_path, kineto):
    kineto.launch("k", 1, 1, 2, 1)
    path = kineto.write(tmp_path / "trace.txt.gz")
    renamed = path.rename(tmp_path / "trace.sqlite")
    assert sniff(renamed) == "kineto"
    assert load(renamed, use_cache=False).gpu.height == 1


def test_hostile_values_do_not_crash(tmp_path):
    text = ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": 1},'
            '{"ph": "X", "cat": "kernel", "name": "k2", "ts": 5, "dur": Infinity, '
            '"args": {"correlation": 99999999999999999999999, "stream": "seven"}},'
            '{"ph": "X", "cat": "kernel", "name": "k3", "ts": 5, "dur": -3},'
            '{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "ts": 1, "dur": 1}]}')
    path = tmp_path / "t.json"
    path.write_bytes(text.encode("latin-1"))
    trace = read_kineto(path)
    trace.validate()
    assert set(trace.gpu["name"].to_list()) >= {"k2", "k3"}
    assert any("negative" in w for w in trace.meta.warnings)


def test_cache_roundtrip(tmp_path, kineto):
    kineto.launch("k", 1, 1, 2, 1)
    path = kineto.write(tmp_path / "t.json")
    first = load(path, cache_dir=tmp_path / "cache")
    assert len(list((tmp_path / "cache").iterdir())) == 1
    second = load(path, cache_dir=tmp_path / "cache")
    for name, frame in first.frames().items():
        assert frame.equals(second.frames()[name])
    assert second.meta.to_dict() == first.meta.to_dict()
    # A changed file is a new entry.
    kineto.launch("k2", 3, 1, 4, 1)
    kineto.write(path)
    assert load(path, cache_dir=tmp_path / "cache").gpu.height == 2


def test_builder_roundtrip_via_gzip(tmp_path):
    b = KinetoBuilder()
    b.launch("k", 1, 1, 2, 1)
    assert read_kineto(b.write(tmp_path / "t.json.gz", indent=None)).gpu.height == 1


@pytest.mark.slow
def test_sync_types_use_nsys_names(public_dir):
    syncs = read_kineto(public_dir / "kineto" / "hta_alexnet_sync.json.gz").syncs
    counts = dict(syncs.group_by("sync_type").len().iter_rows())
    # 20 "Stream Wait Event" records (docs/hta-parity.md), named as nsys names syncType 2.
    assert counts == {"stream": 16, "stream_wait": 20, "context": 5}



def test_decoding_threads_serve_later_reads(tmp_path, kineto):
    from traceanalyzer.ingest.kineto import reader

    kineto.launch("k", 10, 2, 20, 5)
    path = kineto.write(tmp_path / "t.json")
    first = read_kineto(path)
    threads = reader._threads
    assert threads is not None and read_kineto(path).gpu.equals(first.gpu)
    assert reader._threads is threads and first.gpu.height == 1


def test_a_reads_finished_tasks_are_not_held():
    # A finished task holds its result, a decoded chunk: holding them all kept a 1 GB trace's
    # chunks in memory to the end of the read (peak 773 -> 966 MiB).
    from traceanalyzer.ingest.kineto.reader import _Tasks

    with _Tasks() as tasks:
        for _ in range(50):
            assert tasks.submit(bytes, 1 << 20).result() == bytes(1 << 20)
        assert len(tasks.futures) <= 1


def test_pytorch_1_8_category_names(tmp_path, monkeypatch):
    # PyTorch 1.8's Kineto wrote "Operator", "Runtime", "Kernel", "Memcpy" and "Memset" where
    # later versions write cpu_op, cuda_runtime, kernel, gpu_memcpy and gpu_memset.
    def x(cat, name, ts, dur, pid, tid, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                "args": args}

    events = [
        x("Operator", "ProfilerStep#1", 50, 400, 7, "1"),
        x("Operator", "aten::copy_", 100, 60, 7, "1", **{"External id": 3}),
        x("Runtime", "cudaMemcpyAsync", 110, 20, 7, "1", correlation=11),
        x("Memcpy", "Memcpy HtoD (Pageable -> Device)", 140, 10, 0, "stream 7", stream=7,
          correlation=11),
        x("Runtime", "cudaMemsetAsync", 170, 5, 7, "1", correlation=12),
        x("Memset", "Memset (Device)", 180, 5, 0, "stream 7", stream=7, correlation=12),
        x("Runtime", "cudaLaunchKernel", 200, 5, 7, "1", correlation=13),
        x("Kernel", "void gemmSN_TN_kernel", 210, 15, 0, "stream 7", stream=7, device=0,
          correlation=13),
    ]
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_kineto(path)
    gpu = trace.gpu.sort("start_ns")
    assert gpu["kind"].cast(pl.String).to_list() == ["memcpy", "memset", "kernel"]
    assert gpu["copy_kind"].cast(pl.String).to_list() == ["HtoD", None, None]
    assert gpu["graph_launched"].to_list() == [False, False, False]  # each found its launch call
    cpu = trace.cpu.filter(pl.col("kind") == "runtime")
    assert cpu["name"].to_list() == ["cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchKernel"]
    assert trace.annotations["kind"].cast(pl.String).to_list() == ["step"]
    # The compiled reduction reads them as the Polars one does.
    monkeypatch.setattr("traceanalyzer.ingest.kineto.reduce._eventreduce", None)
    reference = read_kineto(path)
    for name, frame in trace.frames().items():
        assert frame.equals(reference.frames()[name]), name


def _memory_event(ts: float, nbytes: int, addr: int, allocated: int, device: int = 0) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
            "tid": 1, "ts": ts,
            "args": {"Total Reserved": 1 << 30, "Total Allocated": allocated, "Bytes": nbytes,
                     "Device Id": device, "Device Type": 1 if device >= 0 else 0,
                     "Addr": addr}}


def test_memory_events_carry_bytes_address_and_the_innermost_operator(tmp_path, kineto):
    kineto.op("aten::linear", 10, 50)
    kineto.op("aten::addmm", 12, 30)
    kineto.op("aten::empty_strided", 14, 2)  # a factory: charged to aten::addmm
    kineto.op("aten::relu", 70, 10)
    for e in kineto.events:
        e["pid"], e["tid"] = 1, 1
    kineto.events += [_memory_event(15, 4096, 0xA0, 4096), _memory_event(45, 512, 0xB0, 4608),
                      _memory_event(75, -4096, 0xA0, 512), _memory_event(90, -512, 0xB0, 0),
                      _memory_event(95, 64, 0xC0, 64, device=-1)]  # host memory
    path = kineto.write(tmp_path / "t.json")
    trace = read_kineto(path)
    trace.validate()
    mem = trace.memory
    # the Parquet cache stores the frame: a second load reads it back
    load(path, cache_dir=tmp_path / "cache")
    assert load(path, cache_dir=tmp_path / "cache").memory.equals(mem)
    assert mem["bytes"].to_list() == [4096, 512, -4096, -512, 64]
    assert mem["address"].to_list() == [0xA0, 0xB0, 0xA0, 0xB0, 0xC0]
    assert mem["allocated_bytes"].to_list() == [4096, 4608, 512, 0, 64]
    assert mem["device"].to_list() == [0, 0, 0, 0, None]
    # 45 is in aten::linear after aten::addmm ended; 90 is after every operator
    assert mem["operator"].to_list() == ["aten::addmm", "aten::linear", "aten::relu", None, None]
    assert mem["source"].cast(pl.String).to_list() == ["allocator"] * 5
    assert trace.counters.height == 10  # the totals as counters, as before
