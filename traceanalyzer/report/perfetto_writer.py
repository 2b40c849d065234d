"""Write a canonical trace, plus a track of findings, as a Perfetto protobuf trace.

This is the ``--annotate`` output for inputs with no JSON form (Nsight Systems, Perfetto). The
file opens in ui.perfetto.dev and reads back through
:func:`traceanalyzer.ingest.perfetto.read_perfetto` to the same frames (the round-trip test holds
us to that). Layout, all on one packet sequence with interned names, categories and annotation
names:

- ``GPU <d>`` track per device, with one child track per stream (``GPU <d> stream <s>``);
  kernels, copies and sets are slices with Kineto's categories (``kernel``, ``gpu_memcpy``,
  ``gpu_memset``) and the canonical columns as debug annotations;
- a process track per pid and a thread track per (pid, tid) for CPU activity, annotations and
  synchronisations; counters are counter tracks under their process (and GPU);
- a ``traceanalyzer findings`` track with one slice per evidence row that has a time range.

Perfetto draws the slices of one track as a stack, so a slice that overlaps its neighbour without
nesting in it goes to an extra ``(overlap n)`` track of the same stream or thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import polars as pl

from traceanalyzer.errors import UsageError
from traceanalyzer.findings import Finding
from traceanalyzer.model import Trace

FINDINGS_TRACK = "traceanalyzer findings"
FINDING_CATEGORY = "traceanalyzer_finding"
META_EVENT = "traceanalyzer.meta"  # read back by traceanalyzer.ingest.perfetto.map
SEQUENCE_ID = 1
BATCH_PACKETS = 20_000

GPU_CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
CPU_CATEGORY = {
    "op": "cpu_op",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "python": "python_function",
    "other": "cpu_other",
}
ANNOTATION_CATEGORY = {
    "step": "user_annotation",
    "user": "user_annotation",
    "gpu_user": "gpu_user_annotation",
    "nvtx": "nvtx",
}
GPU_ARGS = (
    "correlation", "external_id", "device", "stream", "grid_x", "grid_y", "grid_z", "block_x",
    "block_y", "block_z", "registers", "shared_mem", "bytes", "copy_kind", "src_kind", "dst_kind",
    "graph_launched",
)
CPU_ARGS = ("correlation", "external_id", "input_dims", "input_types", "call_stack", "parent_op",
            "concrete_inputs", "flops")
SYNC_ARGS = ("device", "stream", "sync_type", "correlation")

_TYPE_BEGIN, _TYPE_END, _TYPE_INSTANT = 1, 2, 3


def write_perfetto_annotated(
    trace: Trace, findings: list[Finding], out_path: str | os.PathLike[str]
) -> None:
    """Write ``trace`` and ``findings`` to ``out_path`` as a Perfetto protobuf trace.

    Refuses (``UsageError``) to write over the trace's own input file.
    """
    out = Path(out_path)
    src = Path(trace.meta.path)
    if out.resolve() == src.resolve() or (out.exists() and src.exists() and out.samefile(src)):
        raise UsageError(f"{out}: refusing to overwrite the input trace; choose another path")
    with open(out, "wb") as fh:
        write_perfetto_stream(trace, findings, fh)


def write_perfetto_stream(trace: Trace, findings: list[Finding], fh: IO[bytes]) -> None:
    """Write ``trace`` and ``findings`` as a Perfetto protobuf trace into the open file ``fh``."""
    _Writer(fh).write(trace, findings)


class _Writer:
    def __init__(self, fh: IO[bytes]) -> None:
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder

        self._builder_cls = TraceProtoBuilder
        self._fh = fh
        self._builder = TraceProtoBuilder()
        self._count = 0
        self._first = True
        self._names: dict[str, int] = {}
        self._cats: dict[str, int] = {}
        self._arg_names: dict[str, int] = {}
        self._next_uuid = 1
        self._tracks: dict[tuple[Any, ...], int] = {}

    # -- packets -----------------------------------------------------------------------------

    def _packet(self) -> Any:
        if self._count >= BATCH_PACKETS:
            self._flush()
        self._count += 1
        pkt = self._builder.add_packet()
        pkt.trusted_packet_sequence_id = SEQUENCE_ID
        if self._first:
            pkt.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED
            self._first = False
        return pkt

    def _flush(self) -> None:
        if self._count:
            self._fh.write(self._builder.serialize())
        self._builder = self._builder_cls()
        self._count = 0

    def _iid(self, table: dict[str, int], pkt: Any, field: str, value: str) -> int:
        iid = table.get(value)
        if iid is None:
            iid = table[value] = len(table) + 1
            entry = getattr(pkt.interned_data, field).add()
            entry.iid = iid
            entry.name = value
        return iid

    # -- tracks ------------------------------------------------------------------------------

    def _track(self, key: tuple[Any, ...], fill: Any, parent: int | None = None) -> int:
        uuid = self._tracks.get(key)
        if uuid is None:
            uuid = self._tracks[key] = self._next_uuid
            self._next_uuid += 1
            pkt = self._packet()
            desc = pkt.track_descriptor
            desc.uuid = uuid
            if parent:
                desc.parent_uuid = parent
            fill(desc)
        return uuid

    def _process(self, pid: int | None) -> int | None:
        if pid is None:
            return None

        def fill(desc: Any) -> None:
            desc.process.pid = pid

        return self._track(("process", pid), fill)

    def _thread(self, pid: int | None, tid: int | None, lane: int, label: str = "") -> int:
        suffix = " ".join(filter(None, (label, f"(overlap {lane})" if lane else "")))
        if tid is None:
            proc = self._process(pid)
            if not suffix and proc is not None:
                return proc
            return self._named(("proc", pid, label, lane), f"process {pid} {suffix}", proc)
        parent = self._process(pid)

        def fill(desc: Any) -> None:
            desc.thread.pid = pid if pid is not None else 0
            desc.thread.tid = tid
            if suffix:
                desc.name = f"thread {tid} {suffix}"

        return self._track(("thread", pid, tid, label, lane), fill, parent)

    def _named(self, key: tuple[Any, ...], name: str, parent: int | None = None) -> int:
        def fill(desc: Any) -> None:
            desc.name = name

        return self._track(key, fill, parent)

    def _gpu(self, device: int | None) -> int:
        return self._named(("gpu", device), f"GPU {device}" if device is not None else "GPU")

    def _stream(self, device: int | None, stream: int | None, lane: int) -> int:
        name = f"GPU {device} stream {stream}" if device is not None else f"GPU stream {stream}"
        if lane:
            name += f" (overlap {lane})"
        return self._named(("stream", device, stream, lane), name, self._gpu(device))

    # -- events ------------------------------------------------------------------------------

    def _slice(
        self, track: int, ts: int, name: str, cat: str, args: dict[str, Any], etype: int
    ) -> None:
        pkt = self._packet()
        pkt.timestamp = ts
        te = pkt.track_event
        te.type = etype
        te.track_uuid = track
        te.name_iid = self._iid(self._names, pkt, "event_names", name)
        te.category_iids.append(self._iid(self._cats, pkt, "event_categories", cat))
        for key, value in args.items():
            if value is None:
                continue
            ann = te.debug_annotations.add()
            ann.name_iid = self._iid(self._arg_names, pkt, "debug_annotation_names", key)
            if isinstance(value, bool):
                ann.bool_value = value
            elif isinstance(value, int):
                ann.int_value = value
            elif isinstance(value, float):
                ann.double_value = value
            else:
                ann.string_value = str(value)

    def _end(self, track: int, ts: int) -> None:
        pkt = self._packet()
        pkt.timestamp = ts
        te = pkt.track_event
        te.type = _TYPE_END
        te.track_uuid = track

    def _emit(
        self,
        rows: Iterable[dict[str, Any]],
        group: Any,
        track_for: Any,
        name: Any,
        cat: Any,
        args: Any,
    ) -> None:
        """Write ``rows`` (sorted by start, longest first) as properly nested slices."""
        lanes: dict[Any, list[list[tuple[int, int]]]] = {}
        for row in rows:
            start, end = row["start_ns"], max(row["end_ns"], row["start_ns"])
            key = group(row)
            stacks = lanes.setdefault(key, [])
            lane = self._place(stacks, start, end)
            track = track_for(row, lane)
            self._slice(track, start, name(row), cat(row), args(row), _TYPE_BEGIN)
            stacks[lane].append((end, track))
        for stacks in lanes.values():
            for stack in stacks:
                while stack:
                    end, track = stack.pop()
                    self._end(track, end)

    def _place(self, stacks: list[list[tuple[int, int]]], start: int, end: int) -> int:
        for lane, stack in enumerate(stacks):
            while stack and stack[-1][0] <= start:
                top_end, track = stack.pop()
                self._end(track, top_end)
            if not stack or end <= stack[-1][0]:
                return lane
        stacks.append([])
        return len(stacks) - 1

    # -- whole trace -------------------------------------------------------------------------

    def write(self, trace: Trace, findings: list[Finding]) -> None:
        meta_track = self._named(("meta",), "traceanalyzer")
        self._slice(
            meta_track,
            _first_ts(trace),
            META_EVENT,
            "traceanalyzer",
            {"rank": trace.meta.rank, "world_size": trace.meta.world_size},
            _TYPE_INSTANT,
        )
        self._emit(
            _rows(trace.gpu),
            group=lambda r: (r["device"], r["stream"]),
            track_for=lambda r, lane: self._stream(r["device"], r["stream"], lane),
            name=lambda r: r["name"] or "",
            cat=lambda r: GPU_CATEGORY[r["kind"]],
            args=lambda r: {k: r[k] for k in GPU_ARGS},
        )
        self._emit(
            _rows(trace.cpu),
            group=lambda r: (r["pid"], r["tid"]),
            track_for=lambda r, lane: self._thread(r["pid"], r["tid"], lane),
            name=lambda r: r["name"] or "",
            cat=lambda r: CPU_CATEGORY[r["kind"]],
            args=lambda r: {k: r[k] for k in CPU_ARGS},
        )
        self._emit(
            _rows(trace.annotations),
            group=lambda r: ("ann", r["pid"], r["tid"]),
            track_for=lambda r, lane: self._thread(r["pid"], r["tid"], lane, "annotations"),
            name=lambda r: r["name"] or "",
            cat=lambda r: ANNOTATION_CATEGORY[r["kind"]],
            args=lambda r: {"domain": r["domain"]},
        )
        self._emit(
            _rows(trace.syncs),
            group=lambda r: ("sync", r["pid"], r["tid"]),
            track_for=lambda r, lane: self._thread(r["pid"], r["tid"], lane, "syncs"),
            name=lambda r: r["sync_type"] or "sync",
            cat=lambda r: "cuda_sync",
            args=lambda r: {k: r[k] for k in SYNC_ARGS},
        )
        self._counters(trace.counters)
        self._findings(findings)
        self._flush()

    def _counters(self, counters: pl.DataFrame) -> None:
        for row in counters.sort("ts_ns").iter_rows(named=True):
            parent = self._process(row["pid"])
            if row["device"] is not None:
                parent = self._named(("gpu-under", row["pid"], row["device"]),
                                     f"GPU {row['device']}", parent)

            def fill(desc: Any, name: str = row["name"]) -> None:
                desc.name = name
                desc.counter.SetInParent()

            track = self._track(("counter", row["pid"], row["device"], row["name"]), fill, parent)
            pkt = self._packet()
            pkt.timestamp = row["ts_ns"]
            te = pkt.track_event
            te.type = 4  # TYPE_COUNTER
            te.track_uuid = track
            te.double_counter_value = row["value"]

    def _findings(self, findings: list[Finding]) -> None:
        rows = []
        for finding in findings:
            for ev in finding.evidence:
                start, end = ev.get("start_ns"), ev.get("end_ns")
                if not isinstance(start, int) or not isinstance(end, int):
                    continue
                extra = {k: v for k, v in ev.items() if isinstance(v, (int, float, str, bool))}
                extra.update(rule_id=finding.rule_id, severity=finding.severity)
                rows.append({"start_ns": start, "end_ns": end, "finding": finding, "args": extra})
        rows.sort(key=lambda r: (r["start_ns"], -r["end_ns"]))
        root = self._named(("findings",), FINDINGS_TRACK)
        self._emit(
            rows,
            group=lambda r: "findings",
            track_for=lambda r, lane: root if lane == 0 else self._named(
                ("findings", lane), f"{FINDINGS_TRACK} (overlap {lane})", root),
            name=lambda r: f"{r['finding'].slug}: {r['finding'].message}",
            cat=lambda r: FINDING_CATEGORY,
            args=lambda r: r["args"],
        )


def _rows(frame: pl.DataFrame) -> Iterator[dict[str, Any]]:
    ordered = frame.with_columns(_neg_end=-pl.col("end_ns")).sort("start_ns", "_neg_end")
    for row in ordered.drop("_neg_end").iter_rows(named=True):
        for key in ("kind", "copy_kind", "src_kind", "dst_kind"):
            if key in row and row[key] is not None:
                row[key] = str(row[key])
        yield row


def _first_ts(trace: Trace) -> int:
    starts = [f["start_ns"].min() for f in (trace.gpu, trace.cpu) if f.height]
    return int(min(starts)) if starts else 0
