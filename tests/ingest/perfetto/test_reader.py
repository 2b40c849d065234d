"""Native Perfetto reader: rocprofv3-like layout, generic TrackEvent, interning, broken inputs."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import polars as pl
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as TraceProto
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from tests.support.perfetto_builder import RocprofLikeBuilder, mutants, small_rocprof_trace
from traceanalyzer.errors import InputError
from traceanalyzer.ingest import read_any, sniff
from traceanalyzer.ingest.perfetto import read_perfetto
from traceanalyzer.ingest.perfetto.decode import UNKNOWN_NAME

BEGIN, END = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END


def _rocprof_trace() -> RocprofLikeBuilder:
    b = RocprofLikeBuilder()
    b.hip_api(4242, 1_000, 1_500, "hipMemcpyAsync", 1)
    b.copy(2, 0, 1_600, 2_600, 1, 4096)
    b.hip_api(4242, 2_000, 2_300, "hipLaunchKernel", 2)
    b.hip_api(4243, 2_400, 2_500, "hipLaunchKernel", 3)
    b.kernel(2, 0, 3_000, 5_000, "ck_gemm_xdl_cshuffle_v3", 2)
    b.kernel(2, 1, 5_000, 5_200, "void at::native::vectorized_elementwise_kernel<4>", 3)
    return b


def test_rocprof_layout_maps_to_canonical_frames(tmp_path: Path) -> None:
    path = _rocprof_trace().write(tmp_path / "app.pftrace")
    assert sniff(path) == "perfetto"
    trace = read_any(path)
    trace.validate()
    gpu = trace.gpu
    assert gpu["kind"].cast(pl.String).to_list() == ["memcpy", "kernel", "kernel"]
    assert gpu["category"].cast(pl.String).to_list() == ["memcpy", "gemm", "elementwise"]
    assert gpu["device"].to_list() == [2, 2, 2]
    assert gpu["stream"].to_list() == [0, 0, 1]
    assert gpu["correlation"].to_list() == [1, 2, 3]
    assert gpu["start_ns"].to_list() == [1_600, 3_000, 5_000]
    assert gpu["end_ns"].to_list() == [2_600, 5_000, 5_200]
    assert gpu["bytes"].to_list() == [4096, None, None]
    assert gpu["copy_kind"].cast(pl.String).to_list() == ["HtoD", None, None]
    assert gpu["shared_mem"].to_list() == [None, 512, 512]
    cpu = trace.cpu
    assert cpu["kind"].cast(pl.String).unique().to_list() == ["runtime"]
    assert cpu["correlation"].to_list() == [1, 2, 3]
    assert cpu["pid"].unique().to_list() == [4242]
    assert cpu["tid"].to_list() == [4242, 4242, 4243]
    assert trace.meta.profiler == "rocprofv3 (Perfetto)"
    assert [d.id for d in trace.meta.devices] == [2]
    assert trace.meta.devices[0].vendor == "amd"
    assert trace.meta.warnings == []


def test_gzipped_trace_reads_the_same(tmp_path: Path) -> None:
    data = _rocprof_trace().serialize()
    plain = tmp_path / "a.perfetto-trace"
    packed = tmp_path / "a.pb"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    assert sniff(packed) == "perfetto"
    assert read_perfetto(plain).gpu.equals(read_perfetto(packed).gpu)


def test_small_chunks_give_the_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Packets cut across chunk boundaries must be carried over, not lost.
    path = _rocprof_trace().write(tmp_path / "a.pftrace")
    whole = read_perfetto(path)
    import traceanalyzer.ingest.perfetto.decode as decode

    monkeypatch.setattr(decode, "CHUNK_BYTES", 7)
    chunked = read_perfetto(path)
    assert chunked.gpu.equals(whole.gpu)
    assert chunked.cpu.equals(whole.cpu)
    assert chunked.meta.warnings == []


def _generic(builder: TraceProtoBuilder, seq: int, track: int, ts: int, name_iid: int,
             etype: int = BEGIN, flags: int = 2) -> None:
    pkt = builder.add_packet()
    pkt.trusted_packet_sequence_id = seq
    pkt.sequence_flags = flags
    pkt.timestamp = ts
    pkt.track_event.type = etype
    pkt.track_event.track_uuid = track
    if name_iid:
        pkt.track_event.name_iid = name_iid
        pkt.track_event.category_iids.append(1)


def _intern(builder: TraceProtoBuilder, seq: int, names: dict[int, str], clear: bool) -> None:
    pkt = builder.add_packet()
    pkt.trusted_packet_sequence_id = seq
    pkt.sequence_flags = 1 if clear else 2
    for iid, name in names.items():
        entry = pkt.interned_data.event_names.add()
        entry.iid, entry.name = iid, name
    cat = pkt.interned_data.event_categories.add()
    cat.iid, cat.name = 1, "kernel"


def _gpu_track(builder: TraceProtoBuilder, uuid: int, name: str) -> None:
    pkt = builder.add_packet()
    pkt.track_descriptor.uuid = uuid
    pkt.track_descriptor.name = name


def test_interning_is_per_sequence_and_reset_by_incremental_state_clear(tmp_path: Path) -> None:
    b = TraceProtoBuilder()
    _gpu_track(b, 10, "GPU 0 stream 7")
    _intern(b, 1, {1: "gemm_a"}, clear=True)
    _intern(b, 2, {1: "softmax_b"}, clear=True)  # same iid, other sequence
    _generic(b, 1, 10, 100, 1)
    _generic(b, 1, 10, 200, 0, END)
    _generic(b, 2, 10, 300, 1)
    _generic(b, 2, 10, 400, 0, END)
    _intern(b, 1, {1: "gemm_after_reset"}, clear=True)  # sequence 1 starts over
    _generic(b, 1, 10, 500, 1)
    _generic(b, 1, 10, 600, 0, END)
    path = tmp_path / "t.pftrace"
    path.write_bytes(b.serialize())
    gpu = read_perfetto(path).gpu
    assert gpu["name"].to_list() == ["gemm_a", "softmax_b", "gemm_after_reset"]
    assert gpu["device"].to_list() == [0, 0, 0]
    assert gpu["stream"].to_list() == [7, 7, 7]


def test_undefined_interned_id_is_a_warning_not_a_crash(tmp_path: Path) -> None:
    b = TraceProtoBuilder()
    _gpu_track(b, 10, "GPU 0 stream 7")
    _intern(b, 1, {1: "known"}, clear=True)
    _generic(b, 1, 10, 100, 1)
    _generic(b, 1, 10, 200, 0, END)
    _generic(b, 1, 10, 300, 99)  # iid 99 was never interned
    _generic(b, 1, 10, 400, 0, END)
    path = tmp_path / "t.pftrace"
    path.write_bytes(b.serialize())
    trace = read_perfetto(path)
    assert trace.gpu["name"].to_list() == ["known", UNKNOWN_NAME]
    assert any("never defined" in w for w in trace.meta.warnings)


def test_truncated_stream_keeps_complete_packets(tmp_path: Path) -> None:
    data = _rocprof_trace().serialize()
    path = tmp_path / "cut.pftrace"
    path.write_bytes(data[: len(data) - 5])
    trace = read_perfetto(path)
    # The last kernel's end packet is cut off: that kernel is dropped, the rest stays.
    assert trace.gpu.height == 2
    assert trace.cpu.height == 3
    assert any("truncated" in w for w in trace.meta.warnings)
    assert any("never ended" in w for w in trace.meta.warnings)


def test_truncated_gzip_keeps_what_was_decompressed(tmp_path: Path) -> None:
    b = RocprofLikeBuilder()
    for i in range(2_000):  # enough packets that half a gzip file holds many of them
        b.kernel(0, 0, 10 * i, 10 * i + 5, f"kernel_{i % 7}", i)
    data = gzip.compress(b.serialize())
    path = tmp_path / "cut.pftrace.gz"
    path.write_bytes(data[: len(data) // 2])
    trace = read_perfetto(path)
    assert 0 < trace.gpu.height < 2_000
    assert any("gzip stream ends early" in w for w in trace.meta.warnings)


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    data = _rocprof_trace().serialize()
    # Field 999 (varint) inside a packet, field 77 (bytes) inside a track event, and a top-level
    # field 5 of the Trace message: a newer producer's additions, none known to this protos.
    odd_packet = b"\xb8\x3e\x2a" + b"\x5a\x08" + b"\xea\x04\x03abc" + b"\x48\x03"
    top_level = b"\x2a\x03xyz"
    extra = b"\x0a" + bytes([len(odd_packet)]) + odd_packet + top_level
    path = tmp_path / "odd.pftrace"
    path.write_bytes(data + extra)
    trace = read_perfetto(path)
    assert trace.gpu.height == 3
    assert trace.meta.warnings == []


@pytest.mark.parametrize(
    "payload",
    [b"\x0ahello world, this is not a trace", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"],
)
def test_garbage_is_an_input_error(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "garbage.pftrace"
    path.write_bytes(payload)
    with pytest.raises(InputError):
        read_any(path)


def test_packets_without_track_events_are_an_input_error(tmp_path: Path) -> None:
    b = TraceProtoBuilder()
    b.add_packet().trusted_packet_sequence_id = 1
    path = tmp_path / "empty.pftrace"
    path.write_bytes(b.serialize())
    with pytest.raises(InputError, match="no track events"):
        read_perfetto(path)


def test_counters_flows_and_sequence_clocks(tmp_path: Path) -> None:
    b = TraceProtoBuilder()
    proc = b.add_packet()
    proc.track_descriptor.uuid = 1
    proc.track_descriptor.process.pid = 77
    thread = b.add_packet()
    thread.track_descriptor.uuid = 2
    thread.track_descriptor.parent_uuid = 1
    thread.track_descriptor.thread.pid = 77
    thread.track_descriptor.thread.tid = 78
    counter = b.add_packet()
    counter.track_descriptor.uuid = 3
    counter.track_descriptor.parent_uuid = 1
    counter.track_descriptor.name = "allocated_bytes"
    counter.track_descriptor.counter.SetInParent()
    _gpu_track(b, 4, "GPU 1 stream 3")
    # Sequence 5 uses an incremental clock (id 64), as the Perfetto SDK does by default.
    snap = b.add_packet()
    snap.trusted_packet_sequence_id = 5
    snap.sequence_flags = 1
    snap.trace_packet_defaults.timestamp_clock_id = 64
    clocks = snap.clock_snapshot.clocks
    boot = clocks.add()
    boot.clock_id, boot.timestamp = 6, 1_000_000
    inc = clocks.add()
    inc.clock_id, inc.timestamp, inc.is_incremental = 64, 1_000_000, True

    def event(track: int, delta: int, etype: int, name: str = "", cat: str = "",
              flow: int = 0, value: float | None = None) -> None:
        pkt = b.add_packet()
        pkt.trusted_packet_sequence_id = 5
        pkt.timestamp = delta
        te = pkt.track_event
        te.type = etype
        te.track_uuid = track
        if name:
            te.name = name
        if cat:
            te.categories.append(cat)
        if flow:
            te.flow_ids.append(flow)
        if value is not None:
            te.double_counter_value = value

    event(2, 100, BEGIN, "cudaLaunchKernel", flow=555)  # runtime by name, correlation by flow
    event(3, 10, TrackEvent.TYPE_COUNTER, value=2048.0)
    event(2, 40, END)
    event(4, 50, BEGIN, "my_kernel", flow=555)  # no category: GPU by its track
    event(4, 1_000, END)
    path = tmp_path / "t.pftrace"
    path.write_bytes(b.serialize())
    trace = read_perfetto(path)
    cpu, gpu, counters = trace.cpu, trace.gpu, trace.counters
    assert cpu.select("pid", "tid", "start_ns", "end_ns", "correlation").row(0) == (
        77, 78, 1_000_100, 1_000_150, 555)
    assert cpu["kind"].cast(pl.String).to_list() == ["runtime"]
    assert gpu.select("device", "stream", "start_ns", "end_ns", "correlation").row(0) == (
        1, 3, 1_000_200, 1_001_200, 555)
    assert counters.select("pid", "name", "ts_ns", "value").row(0) == (
        77, "allocated_bytes", 1_000_110, 2048.0)


def test_legacy_complete_events_and_compressed_packets(tmp_path: Path) -> None:
    inner = TraceProto()
    pkt = inner.packet.add()
    pkt.track_descriptor.uuid = 9
    pkt.track_descriptor.name = "GPU 0 stream 1"
    pkt = inner.packet.add()
    pkt.timestamp = 5_000
    te = pkt.track_event
    te.track_uuid = 9
    te.name = "nccl_allreduce_kernel"
    te.categories.append("kernel")
    te.legacy_event.phase = ord("X")
    te.legacy_event.duration_us = 3
    b = TraceProtoBuilder()
    b.add_packet().compressed_packets = zlib.compress(inner.SerializeToString())
    path = tmp_path / "t.pftrace"
    path.write_bytes(b.serialize())
    gpu = read_perfetto(path).gpu
    assert gpu.select("name", "start_ns", "end_ns").row(0) == ("nccl_allreduce_kernel", 5_000, 8_000)
    assert gpu["category"].cast(pl.String).to_list() == ["communication"]


def test_nested_and_back_to_back_slices_pair_correctly(tmp_path: Path) -> None:
    b = TraceProtoBuilder()
    thread = b.add_packet()
    thread.track_descriptor.uuid = 2
    thread.track_descriptor.thread.pid = 1
    thread.track_descriptor.thread.tid = 1

    def ev(ts: int, etype: int, name: str = "") -> None:
        pkt = b.add_packet()
        pkt.trusted_packet_sequence_id = 1
        pkt.timestamp = ts
        pkt.track_event.type = etype
        pkt.track_event.track_uuid = 2
        if name:
            pkt.track_event.name = name
            pkt.track_event.categories.append("cpu_op")

    ev(50, END)  # an end whose begin fell before the trace started
    ev(100, BEGIN, "outer")
    ev(100, BEGIN, "inner_a")
    ev(150, END)
    ev(150, BEGIN, "inner_b")  # starts where inner_a ends
    ev(160, BEGIN, "zero")
    ev(160, END)
    ev(200, END)
    ev(300, END)
    path = tmp_path / "t.pftrace"
    path.write_bytes(b.serialize())
    trace = read_perfetto(path)
    got = {r[0]: (r[1], r[2]) for r in trace.cpu.select("name", "start_ns", "end_ns").iter_rows()}
    assert got == {
        "outer": (100, 300),
        "inner_a": (100, 150),
        "inner_b": (150, 200),
        "zero": (160, 160),
    }
    assert any("no matching begin" in w for w in trace.meta.warnings)


def test_mutated_traces_never_raise_anything_but_input_error(tmp_path: Path) -> None:
    path = tmp_path / "mutant.pftrace"
    outcomes = {"read": 0, "rejected": 0}
    for mutant in mutants(small_rocprof_trace(), seed=1234, count=240):
        path.write_bytes(mutant)
        try:
            trace = read_perfetto(path)
        except InputError:
            outcomes["rejected"] += 1
        else:
            trace.validate()
            outcomes["read"] += 1
    assert outcomes["read"] > 0
