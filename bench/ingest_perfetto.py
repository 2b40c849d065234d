"""Benchmark: Perfetto protobuf ingest (``read_perfetto``) with the compiled packet walker against
the Python decoder it must equal, in MB/s of trace file and peak RSS.

    python bench/ingest_perfetto.py                  # builds bench/out/perfetto_rocprof_120000.pftrace
    python bench/ingest_perfetto.py --events 400000 --repeat 3
    python bench/ingest_perfetto.py path/to/trace.pftrace

Each measurement runs in a fresh child process (imports done before the clock, as bench/run.py's
ingest child does), after one untimed read has put the file in the page cache; we print the best
of ``--repeat`` runs per decoder. MB/s = file size / wall time of the whole read, canonical
frames included (the decoders differ only in the packet walk, so the ratio understates theirs).

The default input has rocprofv3's pftrace layout (interned names, categories and debug annotation
names on one sequence; HIP calls on thread tracks, kernels on GPU queue tracks, 6-9 debug
annotations per slice), written with the ``perfetto`` package's TraceProtoBuilder. There is no
peer to run beside it here: Perfetto's trace_processor is a download, and this machine has none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

CHILD = r"""
import json, resource, sys, time
import numpy, polars, pyarrow  # noqa: imported before the clock starts
from traceanalyzer.ingest.perfetto import decode as perfetto_decode
from traceanalyzer.ingest.perfetto import read_perfetto
perfetto_decode.WALKER_AVAILABLE = perfetto_decode.WALKER_AVAILABLE and sys.argv[2] == "walker"
import traceanalyzer.ingest.perfetto.map, perfetto.protos.perfetto.trace.perfetto_trace_pb2  # noqa
t0, c0 = time.perf_counter(), time.process_time()
trace = read_perfetto(sys.argv[1])
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "gpu": trace.gpu.height, "cpu": trace.cpu.height,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build_rocprof_like(path: Path, events: int) -> None:
    """A rocprofv3-shaped trace: ``events`` HIP launches on 4 threads, each with its kernel."""
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    builder = TraceProtoBuilder()
    interned: dict[tuple[str, str], int] = {}

    def packet(first: bool = False):  # noqa: ANN202 - the package's generated class
        pkt = builder.add_packet()
        pkt.trusted_packet_sequence_id = 7
        pkt.sequence_flags = 1 if first else 2
        return pkt

    def iid(pkt, table: str, value: str) -> int:  # noqa: ANN001
        key = (table, value)
        if key not in interned:
            interned[key] = len(interned) + 1
            entry = getattr(pkt.interned_data, table).add()
            entry.iid, entry.name = interned[key], value
        return interned[key]

    pkt = packet(first=True)
    pkt.track_descriptor.uuid = 1
    pkt.track_descriptor.process.pid = 4242
    pkt.track_descriptor.process.process_name = "hip_app"
    tracks = {}
    for n, name in enumerate([*(f"THREAD {t} ({4242 + t})" for t in range(4)),
                              "COMPUTE AGENT [2] QUEUE [0] (GPU)",
                              "COMPUTE AGENT [2] QUEUE [1] (GPU)"]):
        pkt = packet()
        pkt.track_descriptor.uuid = tracks[name] = 100 + n
        pkt.track_descriptor.name = name

    def slice_(track: int, start: int, end: int, name: str, cat: str, args: dict) -> None:
        pkt = packet()
        pkt.timestamp = start
        te = pkt.track_event
        te.type, te.track_uuid = 1, track
        te.name_iid = iid(pkt, "event_names", name)
        te.category_iids.append(iid(pkt, "event_categories", cat))
        for key, value in {"begin_ns": start, "end_ns": end, **args}.items():
            ann = te.debug_annotations.add()
            ann.name_iid = iid(pkt, "debug_annotation_names", key)
            if isinstance(value, str):
                ann.string_value = value
            else:
                ann.uint_value = value
        end_pkt = packet()
        end_pkt.timestamp = end
        end_pkt.track_event.type, end_pkt.track_event.track_uuid = 2, track

    for i in range(events):
        t = i * 1000
        thread = tracks[f"THREAD {i % 4} ({4242 + i % 4})"]
        slice_(thread, t, t + 300, "hipLaunchKernel", "hip_api",
               {"tid": 4242 + i % 4, "kind": 1, "operation": 42, "corr_id": i})
        slice_(tracks[f"COMPUTE AGENT [2] QUEUE [{i % 2}] (GPU)"], t + 400, t + 900,
               f"kernel_{i % 50}", "kernel_dispatch",
               {"kind": 11, "agent": "GPU-2", "corr_id": i, "queue": i % 2,
                "group_segment_size": 512, "workgroup_size": 256, "grid_size": 65536})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(builder.serialize())
    os.replace(tmp, path)


def measure(path: Path, decoder: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), decoder], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?", type=Path)
    ap.add_argument("--events", type=int, default=120_000,
                    help="HIP launches (and kernels) in the generated trace [120000: ~25 MB]")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    path = a.trace
    if path is None:
        path = OUT / f"perfetto_rocprof_{a.events}.pftrace"
        if not path.exists():
            build_rocprof_like(path, a.events)
    size_mb = path.stat().st_size / 1e6
    path.read_bytes()  # into the page cache
    best = {}
    for decoder in ("walker", "python"):
        runs = [measure(path, decoder) for _ in range(a.repeat)]
        best[decoder] = min(runs, key=lambda r: r["wall_s"])
    print(f"{path.name}: {size_mb:.1f} MB, {best['walker']['gpu']} GPU and "
          f"{best['walker']['cpu']} CPU rows")
    for decoder, r in best.items():
        print(f"  {decoder:7s} {r['wall_s']:6.2f} s  {size_mb / r['wall_s']:6.1f} MB/s  "
              f"{r['cpu_s']:6.2f} CPU-s  peak {r['peak_rss_mb']:5.0f} MiB")
    print(f"  walker vs Python decoder: {best['python']['wall_s'] / best['walker']['wall_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
