"""Time Holistic Trace Analysis (HTA) loading traces, for the comparison in bench/.

    python bench/hta_load.py --venv /tmp/hta-venv TRACE...

HTA is never a project dependency: it lives in a throwaway venv that this script creates
when missing (``holistictraceanalysis`` with ``pandas<3``; HTA breaks with pandas 3). Each
trace is loaded by ``TraceAnalysis(trace_dir=...)`` (parse + correlation + iteration
filtering, HTA's full load) in a fresh child process of the venv's python; one JSON line
per trace goes to stdout:

    {"trace": ..., "size_bytes": ..., "load_s": ..., "peak_rss_mb": ..., ...}

load_s times TraceAnalysis() only (not python start-up or imports); peak_rss_mb is the
child's whole peak RSS (os.wait4 rusage), import_rss_mb its RSS after importing HTA, so
peak_rss_mb - import_rss_mb is what the load itself added.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PIP_SPECS = ["holistictraceanalysis", "pandas<3"]

# Runs inside the venv. argv: trace path. Prints one JSON object.
CHILD = r"""
import json, logging, os, resource, sys, tempfile, time
from hta.configs.config import logger
from hta.trace_analysis import TraceAnalysis
from importlib.metadata import version
logger.setLevel(logging.ERROR)
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
out = {"hta_version": version("HolisticTraceAnalysis"), "pandas_version": version("pandas"),
       "import_rss_mb": round(rss(), 1), "error": None}
path = os.path.abspath(sys.argv[1])
with tempfile.TemporaryDirectory(prefix="hta-load-") as d:
    # HTA takes a directory and loads every *.json / *.gz in it: give it just this trace.
    os.symlink(path, os.path.join(d, os.path.basename(path)))
    t0 = time.perf_counter()
    try:
        ta = TraceAnalysis(trace_dir=d)
        out["events"] = int(sum(len(df) for df in ta.t.traces.values()))
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    out["load_s"] = round(time.perf_counter() - t0, 3)
print(json.dumps(out))
"""


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path) -> Path:
    """Create the venv and install HTA unless its python can already import hta."""
    py = venv_python(venv)
    if py.exists():
        ok = subprocess.run([str(py), "-c", "import hta.trace_analysis"], capture_output=True)
        if ok.returncode == 0:
            return py
    print(f"creating HTA venv in {venv} ...", file=sys.stderr)
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", *PIP_SPECS],
        check=True,
        stdout=sys.stderr,
    )
    return py


def run_measured(args: list[str], timeout_s: float, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> dict:
    """Run ``args`` in a child; its exit status, rusage (peak RSS and CPU of exactly that child,
    via wait4), wall time, output, and whether it was killed at ``timeout_s``.

    Output goes to temporary files, not pipes, so a chatty child cannot block on a full pipe.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err, cwd=cwd, env=env)
        killed = False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout_s:
                proc.kill()
                killed = True
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return {"status": status, "rusage": ru, "wall_s": wall, "killed": killed,
                "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace")}


def time_load(py: Path, trace: Path, timeout_s: float) -> dict:
    """Load one trace in a child; peak RSS of exactly that child via wait4."""
    run = run_measured([str(py), "-c", CHILD, str(trace)], timeout_s)
    rec: dict = {"trace": str(trace), "size_bytes": trace.stat().st_size}
    try:
        rec.update(json.loads(run["stdout"].strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        why = ("timeout" if run["killed"]
               else f"exit {os.waitstatus_to_exitcode(run['status'])}")
        rec.update({"load_s": None, "error": f"{why}: {run['stderr'].strip()[-300:]}"})
    rec["peak_rss_mb"] = round(run["rusage"].ru_maxrss / 1024.0, 1)
    rec["child_wall_s"] = round(run["wall_s"], 3)
    rec["child_cpu_s"] = round(run["rusage"].ru_utime + run["rusage"].ru_stime, 3)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description="Time HTA's trace load (wall s, peak RSS MB).")
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--venv", type=Path, default=Path("/tmp/hta-venv"))
    ap.add_argument("--repeat", type=int, default=1, help="loads per trace; each printed")
    ap.add_argument("--timeout-s", type=float, default=3600)
    a = ap.parse_args()
    missing = [str(t) for t in a.traces if not t.is_file()]
    if missing:
        ap.error(f"no such trace file: {', '.join(missing)}")
    py = ensure_venv(a.venv)
    for trace in a.traces:
        for i in range(a.repeat):
            rec = time_load(py, trace, a.timeout_s)
            rec["run"] = i
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
