"""Time a batch of 100+ traces on 1 and 2 pool workers and on a Dask LocalCluster.

The batch is built from the small public traces (Kineto JSON and an Nsight Systems export):
each copy is a distinct file (gzip copies get a different header mtime, so every trace has its
own content key), plus one deliberately corrupt file (a truncated SQLite export). The cache is
off, so every run parses every trace. Checks that all runs give byte-identical summary.csv and
per-trace JSON reports, and prints traces/s and MB/s for each.

    python bench/batch.py [--traces 120] [--workers 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO.parent / "shared" / "traces" / "public"
SOURCES = [
    "kineto/hta_alexnet_sync.json.gz",
    "kineto/hta_triton_example.json.gz",
    "kineto/hta_mi250_rocm.json.gz",
    "kineto/hta_cpu_only.json.gz",
    "kineto/tracelens_torch_compile_triton.json.gz",
    "kineto/tracelens_vllm_decode_cudagraph.json.gz",
    "kineto/tracelens_h100_qwen_0p5b.json.gz",
    "nsys/nsysai_rtx3080_small.sqlite",
]


def build_inputs(folder: Path, count: int) -> int:
    """Write ``count`` traces (one of them corrupt) into ``folder``; return their total bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = [PUBLIC / s for s in SOURCES if (PUBLIC / s).is_file()]
    if not sources:
        sys.exit(f"no public traces under {PUBLIC}")
    raw = {s: (gzip.decompress(s.read_bytes()) if s.name.endswith(".gz") else s.read_bytes())
           for s in sources}
    for i in range(count - 1):
        src = sources[i % len(sources)]
        dst = folder / f"{i:03d}_{src.name}"
        if src.name.endswith(".gz"):
            dst.write_bytes(gzip.compress(raw[src], compresslevel=6, mtime=i + 1))
        else:
            dst.write_bytes(raw[src])
    sqlite = next((s for s in sources if s.suffix == ".sqlite"), sources[0])
    (folder / "999_corrupt_truncated.sqlite").write_bytes(sqlite.read_bytes()[:8192])
    return sum(p.stat().st_size for p in folder.iterdir())


def run(label: str, inputs: Path, out: Path, **kwargs: object) -> float:
    from traceanalyzer.batch import run_batch

    cpu0 = _cpu_s()
    t0 = time.perf_counter()
    result = run_batch([inputs], out, use_cache=False, **kwargs)
    wall = time.perf_counter() - t0
    cpu = _cpu_s() - cpu0
    total = result.analyzed + result.failed
    print(f"{label:<28} {total:>4} traces  {wall:7.2f} s  {total / wall:6.1f} traces/s  "
          f"{cpu / total:5.2f} CPU s/trace  ok {result.analyzed}, failed {result.failed}",
          flush=True)
    return wall


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (pool and LocalCluster workers):
    unlike wall time, it does not depend on what else the machine is running."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def same_outputs(a: Path, b: Path) -> bool:
    if (a / "summary.csv").read_bytes() != (b / "summary.csv").read_bytes():
        return False
    ja = sorted(p.name for p in (a / "reports").glob("*.json"))
    jb = sorted(p.name for p in (b / "reports").glob("*.json"))
    return ja == jb and all((a / "reports" / n).read_bytes() == (b / "reports" / n).read_bytes()
                            for n in ja)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=120)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="Keep inputs and outputs in this folder.")
    parser.add_argument("--no-dask", action="store_true")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="ta-bench-batch-"))
    inputs = root / "in"
    size = build_inputs(inputs, args.traces)
    print(f"{args.traces} traces, {size / 1e6:.1f} MB, on {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} (cache off: every run parses every trace)")
    runs = {"pool, 1 worker": dict(workers=1),
            f"pool, {args.workers} workers": dict(workers=args.workers)}
    if not args.no_dask:
        runs[f"dask LocalCluster, {args.workers} w"] = dict(workers=args.workers, dask="local")
    outs = {}
    for i, (label, kwargs) in enumerate(runs.items()):
        outs[label] = root / f"out{i}"
        wall = run(label, inputs, outs[label], **kwargs)
        print(f"{'':<28} {size / 1e6 / wall:29.1f} MB/s of trace files")
        if i == 0:
            # right away: rule files edited in between would (rightly) invalidate the reports
            from traceanalyzer.batch import run_batch

            t0 = time.perf_counter()
            again = run_batch([inputs], outs[label], workers=args.workers, use_cache=False)
            print(f"{'re-run, all up to date':<28} {time.perf_counter() - t0:16.2f} s  "
                  f"({again.skipped} skipped, {again.failed} failed retried, "
                  f"{again.analyzed} analyzed again)")
    first = next(iter(outs.values()))
    identical = all(same_outputs(first, o) for o in outs.values())
    print("summaries and JSON reports identical across runs:", "yes" if identical else "NO")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(0 if identical else 1)


if __name__ == "__main__":
    main()
