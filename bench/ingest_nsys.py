"""Benchmark: Nsight Systems SQLite ingest (``read_nsys``) in MB/s of SQLite file, and peak RSS.

    python bench/ingest_nsys.py                      # builds bench/out/nsys_500MB.sqlite once
    python bench/ingest_nsys.py --size 1GB --repeat 3
    python bench/ingest_nsys.py path/to/export.sqlite

Each measurement runs in a fresh child process (so peak RSS is that of one ingest, and nothing
is warm except the OS page cache, which a first untimed read fills). The child reports wall time,
CPU time and its own peak RSS; we print the best of ``--repeat`` runs for each engine
(connectorx when installed, and the sqlite3 fallback). MB/s = file size / wall time.

The default input tiles the public 2-GPU torchrun export (kernels, runtime calls, copies,
syncs and, mostly, NVTX ranges) to the requested size with bench/make_big_trace.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SEED = REPO.parent / "shared" / "traces" / "public" / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite"

CHILD = r"""
import json, resource, sys, time
from traceanalyzer.ingest.nsys import read_nsys
from traceanalyzer.ingest.nsys.sqlite_columns import engine
t0, c0 = time.perf_counter(), time.process_time()
trace = read_nsys(sys.argv[1])
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
rows = {name: frame.height for name, frame in trace.frames().items()}
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "engine": engine(), "rows": rows,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(path: Path, engine: str) -> dict:
    env = dict(os.environ, TRACEANALYZER_SQLITE_ENGINE=engine)
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, check=True,
                         capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def engines() -> list[str]:
    try:
        import connectorx  # noqa: F401
    except ImportError:
        return ["sqlite3"]
    return ["connectorx", "sqlite3"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, help="an nsys SQLite export (default: tiled)")
    ap.add_argument("--size", default="500MB", help="size of the tiled default input")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--engine", choices=["connectorx", "sqlite3"], action="append")
    args = ap.parse_args()
    path = args.path
    if path is None:
        path = HERE / "out" / f"nsys_{args.size}.sqlite"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([sys.executable, str(HERE / "make_big_trace.py"), "nsys", str(SEED),
                            str(path), "--size", args.size], check=True)
    size_mb = path.stat().st_size / 1e6
    path.read_bytes()  # fill the page cache: we measure ingest, not the disk
    # Wall time depends on what else runs: say how loaded the machine was.
    load = os.getloadavg()[0]
    print(f"{path.name}: {size_mb:.0f} MB, {os.cpu_count()} CPUs, load average {load:.1f}, "
          f"best of {args.repeat}")
    for engine in args.engine or engines():
        runs = [measure(path, engine) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["wall_s"])
        print(f"  {engine:10s} {size_mb / best['wall_s']:7.1f} MB/s  wall {best['wall_s']:.2f} s"
              f"  cpu {best['cpu_s']:.2f} s  peak RSS {max(r['peak_rss_mb'] for r in runs):.0f} MB"
              f"  ({size_mb / best['cpu_s']:.0f} MB per CPU-second)  rows {best['rows']}")


if __name__ == "__main__":
    main()
