"""Where a Kineto ingest's time goes, step by step: the profile behind bench/NOTES.md, rounds 5-15.

    python bench/profile_kineto.py TRACE.json            # a fresh process, then a warm one
    python bench/profile_kineto.py TRACE.json --reads 3  # three reads in the warm process

Each run is a child process that imports everything first, as bench/run.py's ingest child does,
and then reads the trace with the reader's steps wrapped: per step, when it started and ended (ms
since the read began, and which thread), and the page faults, system and user CPU time of the
whole process since the previous mark. "cut" marks when the main thread hands a chunk (its size
in bytes) to the decoding threads; a chunk's decoding includes its compiled reduction. The first
read of a process pays what a process pays once (page faults of fresh memory, Polars' and the
regex engine's set-up); the later reads show what the trace itself costs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import functools, resource, sys, threading, time
import numpy, polars, pyarrow  # noqa: imported before the clock starts, as bench/run.py does
import traceanalyzer.ingest.kineto.assemble as assemble
import traceanalyzer.ingest.kineto.reader as kineto
from traceanalyzer.ingest import read_any

# Each step, wrapped where it is called from.
STEPS = [(kineto, "_decode_chunk"), (kineto, "reduce_frame"), (kineto, "_reduce_group"),
         (kineto, "assemble"), (assemble, "assemble_compiled"), (assemble, "_cpu_and_gpu_frames")]
marks = []


def mark(label):
    r = resource.getrusage(resource.RUSAGE_SELF)
    marks.append((label, threading.current_thread().name, time.perf_counter(), r.ru_minflt,
                  r.ru_stime, r.ru_utime))


def wrapped(module, name):
    step = getattr(module, name)

    @functools.wraps(step)
    def run(*args, **kwargs):
        mark(name + " start")
        try:
            return step(*args, **kwargs)
        finally:
            mark(name + " end")
    return run


for module, name in STEPS:
    setattr(module, name, wrapped(module, name))
cut_chunks = kineto.iter_ndjson_chunks


def marked_chunks(*args, **kwargs):
    for chunk in cut_chunks(*args, **kwargs):
        mark(f"cut {len(chunk)}")
        yield chunk


kineto.iter_ndjson_chunks = marked_chunks
for n in range(int(sys.argv[2])):
    marks.clear()
    mark("read start")
    read_any(sys.argv[1])
    mark("read end")
    t0, last = marks[0][2], marks[0]
    print(f"read {n + 1} of this process: {1000 * (marks[-1][2] - t0):.1f} ms, "
          f"{marks[-1][3] - marks[0][3]} page faults")
    for label, thread, t, flt, sys_s, usr_s in marks[1:]:
        print(f"  {label:20s} {thread:>10s} {1000 * (t - t0):7.1f} ms  faults {flt - last[3]:6d}"
              f"  sys {1000 * (sys_s - last[4]):5.1f} ms  user {1000 * (usr_s - last[5]):5.1f} ms")
        last = (label, thread, t, flt, sys_s, usr_s)
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--reads", type=int, default=2, help="reads in one process [2]")
    a = ap.parse_args(argv)
    return subprocess.run([sys.executable, "-c", CHILD, str(a.trace.resolve()), str(a.reads)],
                          cwd=REPO).returncode


if __name__ == "__main__":
    sys.exit(main())
