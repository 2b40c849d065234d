"""A distributed job of 256 or 1,024 ranks, made from a real rank's trace: local pool vs Dask.

Each rank is a copy of one real Kineto trace (default: HTA's A100 rank 3 of 8, from the public
multi-rank traces) with its own ``distributedInfo`` rank and world size, a ``hostname`` (8 ranks
per host), its NCCL kernels started 0-21 µs late (one of 8 jitter classes) and, on one rank, 500
µs late: the straggler. Every file is distinct, so every rank is parsed (the cache is off).

    python bench/job.py --ranks 256 [--ranks 1024] [--workers 2] [--dir /tmp/ta-job-bench]
                        [--modes local,dask] [--rules]

Each run is its own process (``--run MODE``), so the client's peak RSS (ru_maxrss) is its own;
the workers' peak RSS is what each task reports at its end (pool workers and Dask worker
processes alike). Prints one line per run and checks that the local and Dask runs give the same
job document.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO.parent / "shared" / "traces" / "public"
SOURCE = PUBLIC / "kineto" / "hta_a100_rank3of8_control.json.gz"
RANKS_PER_HOST = 8
JITTER_CLASSES = 8
JITTER_US = 3.0
LATE_US = 500.0


def _events_blob(events: list[Any], shift_us: float) -> bytes:
    """``"traceEvents": [...]}`` as gzip bytes, NCCL kernels started ``shift_us`` later."""
    if shift_us:
        events = [
            dict(e, ts=e["ts"] + shift_us)
            if isinstance(e, dict)
            and e.get("cat") == "kernel"
            and str(e.get("name", "")).startswith("nccl")
            and "ts" in e
            else e
            for e in events
        ]
    body = b'"traceEvents":' + json.dumps(events, separators=(",", ":")).encode() + b"}"
    return gzip.compress(body, compresslevel=1, mtime=0)


def make_job(
    out_dir: Path,
    n_ranks: int,
    *,
    source: Path = SOURCE,
    late_rank: int | None = None,
    late_us: float = LATE_US,
    ranks_per_host: int = RANKS_PER_HOST,
    jitter_classes: int = JITTER_CLASSES,
    broken: int = 0,
    shared: bool = False,
) -> list[Path]:
    """Write ``n_ranks`` rank traces into ``out_dir`` (module doc), plus ``broken`` files that
    are not traces (a gzip stream cut short). Returns every path written, ranks first.

    Each file is two gzip members, its own metadata then one of a few shared event blobs
    (compressed once): a reader sees one stream, and writing 1,024 ranks takes seconds. By
    default each rank records its rank and host (``distributedInfo``, ``hostname``) and every
    file is distinct (``rank<N>.json.gz``). ``shared``: the files of one jitter class are
    byte-identical (the cache parses 9 traces, not one per rank) and the host and rank come from
    tensorboard_trace_handler's file names, ``node<H>_<pid>.<rank>.pt.trace.json.gz``.
    """
    with gzip.open(source, "rb") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    late_rank = n_ranks // 2 + 5 if late_rank is None else late_rank
    blobs = {c: _events_blob(events, c * JITTER_US) for c in range(jitter_classes)}
    blobs[-1] = _events_blob(events, late_us)
    del events
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    shared_head = gzip.compress(
        json.dumps(doc, separators=(",", ":")).encode()[:-1] + b",", compresslevel=1, mtime=0
    )
    for rank in range(n_ranks):
        blob = blobs[-1] if rank == late_rank else blobs[rank % jitter_classes]
        if shared:
            path = (
                out_dir
                / f"node{rank // ranks_per_host:03d}_{100000 + rank}.{rank}.pt.trace.json.gz"
            )
            path.write_bytes(shared_head + blob)
        else:
            top = dict(
                doc,
                hostname=f"node{rank // ranks_per_host:03d}",
                distributedInfo=dict(
                    doc.get("distributedInfo") or {}, rank=rank, world_size=n_ranks
                ),
            )
            head = json.dumps(top, separators=(",", ":")).encode()[:-1] + b","  # open object
            path = out_dir / f"rank{rank:05d}.json.gz"
            path.write_bytes(gzip.compress(head, compresslevel=1, mtime=0) + blob)
        paths.append(path)
    for i in range(broken):
        path = out_dir / (
            f"node999_{200000 + i}.{n_ranks + i}.pt.trace.json.gz"
            if shared
            else f"rank{n_ranks + i:05d}.json.gz"
        )
        path.write_bytes(blobs[0][:200])  # a gzip stream cut short: no trace in it
        paths.append(path)
    return paths


def _run(
    mode: str, folder: Path, workers: int, rules: bool, out_json: Path, cache_dir: Path | None
) -> dict[str, Any]:
    """One run in this process; writes the job document and returns the figures."""
    from traceanalyzer.analysis.job import job_to_dict
    from traceanalyzer.batch.inputs import expand_inputs
    from traceanalyzer.batch.job import peak_rss_kb, run_job
    from traceanalyzer.report.jsonout import dumps

    paths = expand_inputs([str(folder)])
    stats: dict[str, Any] = {}
    t0 = time.perf_counter()
    job = run_job(
        paths,
        workers=workers,
        dask="local" if mode == "dask" else None,
        rules=rules,
        use_cache=cache_dir is not None,
        cache_dir=cache_dir,
        stats=stats,
    )
    wall = time.perf_counter() - t0
    text = dumps(job_to_dict(job))
    out_json.write_text(text, encoding="utf-8")
    workers_rss = [k for k in stats.get("worker_peak_rss_kb", []) if k]
    return {
        "mode": mode,
        "ranks": job.ranks.height,
        "failed": len(job.failed),
        "wall_s": wall,
        "client_peak_rss_mb": peak_rss_kb() / 1024,
        "workers_peak_rss_mb": max(workers_rss) / 1024 if workers_rss else None,
        "reduce_s_per_rank": sum(s for s in stats.get("seconds", []) if s) / max(len(paths), 1),
        "stragglers": job.stragglers,
        "job_findings": len(job.scale.findings),
        "sha": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def _warm(folder: Path, cache: Path) -> None:
    """Load each distinct file once through the cache, in a child process (not this one)."""
    code = (
        "import sys, hashlib, pathlib\n"
        "from traceanalyzer.ingest import load\n"
        "seen = set()\n"
        "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.json.gz')):\n"
        "    h = hashlib.sha256(p.read_bytes()).hexdigest()\n"
        "    if h not in seen:\n"
        "        seen.add(h)\n"
        "        try: load(p, cache_dir=sys.argv[2])\n"
        "        except Exception: pass\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(folder), str(cache)],
        check=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, action="append", help="ranks (repeatable) [256]")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ta-job-bench"))
    ap.add_argument("--modes", default="local,dask")
    ap.add_argument("--rules", action="store_true", help="run the rules on every rank")
    ap.add_argument("--source", type=Path, default=SOURCE, help="the rank trace to copy")
    ap.add_argument(
        "--shared",
        action="store_true",
        help="ranks of one jitter class share their bytes; the cache, filled before "
        "the runs, serves them (host and rank from the file names)",
    )
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out-json", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run:
        print(
            json.dumps(
                _run(args.run, args.folder, args.workers, args.rules, args.out_json, args.cache_dir)
            )
        )
        return 0
    if not args.source.is_file():
        print(f"missing {args.source}", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for n in args.ranks or [256]:
        folder = args.dir / (f"shared{n}" if args.shared else f"ranks{n}")
        t0 = time.perf_counter()
        if not folder.is_dir() or len(list(folder.glob("*.json.gz"))) != n + 1:
            make_job(folder, n, source=args.source, broken=1, shared=args.shared)
        cache = None
        if args.shared:  # fill the cache with the few distinct traces, outside the timed runs
            cache = args.dir / "cache"
            _warm(folder, cache)
        print(
            f"{n} ranks (+1 broken) in {folder}: generated in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        shas = set()
        for mode in args.modes.split(","):
            cmd = [
                sys.executable,
                __file__,
                "--run",
                mode,
                "--folder",
                str(folder),
                "--workers",
                str(args.workers),
                "--out-json",
                str(args.dir / f"job{n}_{mode}.json"),
            ] + (["--rules"] * args.rules)
            cmd += ["--cache-dir", str(cache)] if cache else []
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                print(f"  {mode}: failed\n{done.stderr[-3000:]}", flush=True)
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            shas.add(r["sha"])
            print(
                f"  {mode:5s} ranks {r['ranks']} (+{r['failed']} failed)  wall "
                f"{r['wall_s']:.1f} s  client peak RSS {r['client_peak_rss_mb']:.0f} MB  "
                f"workers' peak RSS {r['workers_peak_rss_mb']:.0f} MB  reduce "
                f"{r['reduce_s_per_rank']:.2f} s/rank  stragglers {r['stragglers']}  "
                f"job findings {r['job_findings']}  doc {r['sha']}",
                flush=True,
            )
        if len(shas) > 1:
            print("  MISMATCH: the runs' job documents differ", flush=True)
        elif shas:
            print("  the runs' job documents are identical", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
