"""Builders for Perfetto test traces (tested in tests/ingest/perfetto/test_builders.py).

- :class:`RocprofLikeBuilder` writes traces shaped like rocprofv3's ``--output-format pftrace``:
  interned names, categories and debug annotation names on one sequence, HIP API slices on
  thread tracks, kernels on ``COMPUTE AGENT [n] STREAM [s] (GPU)`` tracks, copies on ``COPY to
  AGENT`` tracks, ``corr_id`` annotations and process-scoped flows.
- :func:`kineto_to_perfetto` converts a Kineto/Chrome JSON trace, event by event, to generic
  TrackEvent protobuf (plain, non-interned names; Kineto's arg names as debug annotations).
  It does not go through traceanalyzer's own readers or writer, so the parity test compares two
  independent routes.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

BEGIN = TrackEvent.TYPE_SLICE_BEGIN
END = TrackEvent.TYPE_SLICE_END


class RocprofLikeBuilder:
    """A small trace in rocprofv3's pftrace layout."""

    def __init__(self, seq: int = 7, pid: int = 4242) -> None:
        self.builder = TraceProtoBuilder()
        self.seq = seq
        self.pid = pid
        self._names: dict[str, int] = {}
        self._cats: dict[str, int] = {}
        self._args: dict[str, int] = {}
        self._next = 1000
        self._streams: dict[tuple[str, int, int], int] = {}
        self._threads: dict[int, int] = {}
        pkt = self.packet(first=True)
        desc = pkt.track_descriptor
        desc.uuid = self.process_uuid = 1
        desc.process.pid = pid
        desc.process.process_name = "hip_app"

    def packet(self, first: bool = False) -> Any:
        pkt = self.builder.add_packet()
        pkt.trusted_packet_sequence_id = self.seq
        pkt.sequence_flags = 1 if first else 2  # cleared / needs incremental state
        return pkt

    def _iid(self, table: dict[str, int], pkt: Any, field: str, value: str) -> int:
        if value not in table:
            table[value] = len(table) + 1
            entry = getattr(pkt.interned_data, field).add()
            entry.iid = table[value]
            entry.name = value
        return table[value]

    def thread(self, tid: int) -> int:
        """The main thread gets a thread descriptor (the SDK's ThreadTrack::Current()); other
        threads get a plain top-level track named "THREAD <n> (<tid>)", as rocprofv3 does."""
        if tid not in self._threads:
            self._next += 1
            pkt = self.packet()
            desc = pkt.track_descriptor
            desc.uuid = self._threads[tid] = self._next
            if tid == self.pid:
                desc.parent_uuid = self.process_uuid
                desc.thread.pid = self.pid
                desc.thread.tid = tid
            else:
                desc.name = f"THREAD {len(self._threads) - 1} ({tid})"
        return self._threads[tid]

    def stream(self, agent: int, stream: int, copy: bool = False) -> int:
        key = ("COPY to" if copy else "COMPUTE", agent, stream)
        if key not in self._streams:
            self._next += 1
            pkt = self.packet()
            desc = pkt.track_descriptor
            desc.uuid = self._streams[key] = self._next
            desc.name = f"{key[0]} AGENT [{agent}] STREAM [{stream}] (GPU)"
        return self._streams[key]

    def slice(
        self, track: int, start: int, end: int, name: str, cat: str, args: dict[str, Any],
        flow: int | None = None,
    ) -> None:
        pkt = self.packet()
        pkt.timestamp = start
        te = pkt.track_event
        te.type = BEGIN
        te.track_uuid = track
        te.name_iid = self._iid(self._names, pkt, "event_names", name)
        te.category_iids.append(self._iid(self._cats, pkt, "event_categories", cat))
        if flow is not None:
            te.flow_ids.append(flow)
        for key, value in {"begin_ns": start, "end_ns": end, **args}.items():
            ann = te.debug_annotations.add()
            ann.name_iid = self._iid(self._args, pkt, "debug_annotation_names", key)
            if isinstance(value, str):
                ann.string_value = value
            else:
                ann.uint_value = value
        pkt = self.packet()
        pkt.timestamp = end
        pkt.track_event.type = END
        pkt.track_event.track_uuid = track

    def hip_api(self, tid: int, start: int, end: int, name: str, corr: int) -> None:
        self.slice(self.thread(tid), start, end, name, "hip_api",
                   {"tid": tid, "kind": 1, "operation": 42, "corr_id": corr}, flow=corr ^ 0xABC)

    def kernel(self, agent: int, stream: int, start: int, end: int, name: str, corr: int) -> None:
        self.slice(self.stream(agent, stream), start, end, name, "kernel_dispatch",
                   {"kind": 11, "agent": f"GPU-{agent}", "corr_id": corr, "queue": 1,
                    "group_segment_size": 512, "workgroup_size": 256}, flow=corr ^ 0xABC)

    def copy(self, agent: int, stream: int, start: int, end: int, corr: int, nbytes: int) -> None:
        self.slice(self.stream(agent, stream, copy=True), start, end,
                   "MEMORY_COPY_HOST_TO_DEVICE", "memory_copy",
                   {"src_agent": "CPU-0", "dst_agent": f"GPU-{agent}", "copy_bytes": nbytes,
                    "corr_id": corr}, flow=corr ^ 0xABC)

    def serialize(self) -> bytes:
        return self.builder.serialize()

    def write(self, path: Path) -> Path:
        path.write_bytes(self.serialize())
        return path


def small_rocprof_trace() -> bytes:
    """20 HIP launches and their kernels, on two threads and two streams."""
    b = RocprofLikeBuilder()
    for i in range(20):
        b.hip_api(4242 + i % 2, i * 100, i * 100 + 50, "hipLaunchKernel", i)
        b.kernel(0, i % 2, i * 100 + 60, i * 100 + 90, f"k{i % 3}", i)
    return b.serialize()


def mutants(data: bytes, seed: int, count: int) -> Iterator[bytes]:
    """``data`` broken ``count`` ways in turn: bytes flipped, the end cut off, junk inserted."""
    rng = random.Random(seed)
    for step in range(count):
        mutant = bytearray(data)
        if step % 3 == 0:  # flip bytes
            for _ in range(rng.randint(1, 5)):
                mutant[rng.randrange(len(mutant))] = rng.randrange(256)
        elif step % 3 == 1:  # cut
            mutant = mutant[: rng.randrange(1, len(mutant))]
        else:  # insert junk
            at = rng.randrange(len(mutant))
            mutant[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 20)))
        yield bytes(mutant)


def kineto_ns(us: float) -> int:
    """Kineto µs to ns the way the Kineto reader rounds: the fraction on its own."""
    whole = math.floor(us)
    return int(whole) * 1000 + round((us - whole) * 1000)


_ARG_NAMES = (
    "correlation", "External id", "device", "stream", "grid", "block", "registers per thread",
    "shared memory", "bytes", "kind", "Input Dims", "Input type", "cuda_sync_kind",
)


def kineto_to_perfetto(json_path: Path, out_path: Path) -> int:
    """Convert the complete ('X') events of a Kineto trace to TrackEvent protobuf.

    Every (pid, tid) becomes a thread track; slices that overlap without nesting move to extra
    tracks of the same thread, since a Perfetto track is a stack. Returns the slice count.
    """
    opener = gzip.open if json_path.name.endswith(".gz") else open
    with opener(json_path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    slices = []
    for ev in events:
        if ev.get("ph") != "X" or not isinstance(ev.get("pid"), int):
            continue
        tid = ev.get("tid")
        if not isinstance(tid, int):
            continue
        start = kineto_ns(ev["ts"])
        end = start + max(round(ev.get("dur", 0) * 1000), 0)
        slices.append((start, -end, ev["pid"], tid, ev))
    slices.sort(key=lambda s: (s[0], s[1]))

    builder = TraceProtoBuilder()
    tracks: dict[tuple[int, int, int], int] = {}
    lanes: dict[tuple[int, int], list[list[tuple[int, int]]]] = {}

    def packet() -> Any:
        pkt = builder.add_packet()
        pkt.trusted_packet_sequence_id = 3
        return pkt

    def track(pid: int, tid: int, lane: int) -> int:
        key = (pid, tid, lane)
        if key not in tracks:
            tracks[key] = len(tracks) + 1
            desc = packet().track_descriptor
            desc.uuid = tracks[key]
            desc.thread.pid = pid
            desc.thread.tid = tid
        return tracks[key]

    def end_slice(uuid: int, ts: int) -> None:
        pkt = packet()
        pkt.timestamp = ts
        pkt.track_event.type = END
        pkt.track_event.track_uuid = uuid

    for start, neg_end, pid, tid, ev in slices:
        end = -neg_end
        stacks = lanes.setdefault((pid, tid), [])
        lane = None
        for i, stack in enumerate(stacks):
            while stack and stack[-1][0] <= start:
                top_end, uuid = stack.pop()
                end_slice(uuid, top_end)
            if not stack or end <= stack[-1][0]:
                lane = i
                break
        if lane is None:
            stacks.append([])
            lane = len(stacks) - 1
        uuid = track(pid, tid, lane)
        pkt = packet()
        pkt.timestamp = start
        te = pkt.track_event
        te.type = BEGIN
        te.track_uuid = uuid
        te.name = ev.get("name", "")
        if ev.get("cat"):
            te.categories.append(ev["cat"])
        for key, value in (ev.get("args") or {}).items():
            if key not in _ARG_NAMES or value is None:
                continue
            ann = te.debug_annotations.add()
            ann.name = key
            if isinstance(value, bool):
                ann.bool_value = value
            elif isinstance(value, int):
                ann.int_value = value
            elif isinstance(value, list) and all(isinstance(v, int) for v in value):
                for v in value:
                    ann.array_values.add().int_value = v
            elif isinstance(value, (list, dict)):
                ann.string_value = json.dumps(value)
            else:
                ann.string_value = str(value)
        stacks[lane].append((end, uuid))
    for stacks in lanes.values():
        for stack in stacks:
            while stack:
                top_end, uuid = stack.pop()
                end_slice(uuid, top_end)
    out_path.write_bytes(builder.serialize())
    return len(slices)
