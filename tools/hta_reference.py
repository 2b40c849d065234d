"""Compute Holistic Trace Analysis (HTA) reference numbers for the public Kineto traces.

Run it ONCE with the python of a throwaway venv that has HTA (never a project dependency):

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install holistictraceanalysis "pandas<3"
    /tmp/hta-venv/bin/python tools/hta_reference.py [--traces DIR] [--out FILE]

Each trace is symlinked alone into a temp dir (HTA's TraceAnalysis takes a directory and
reads every *.json / *.gz in it) and analysed in its own child process, so that load time
and peak RSS are per trace. The numbers land in tests/reference/hta_reference.json; the
definitions behind them are in docs/hta-parity.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "traces" / "public" / "kineto"
DEFAULT_OUT = REPO / "tests" / "reference" / "hta_reference.json"


def _num(x: Any) -> Any:
    """JSON-safe scalar: numpy -> python, NaN -> None."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if f != f:  # NaN
        return None
    return int(f) if f.is_integer() and abs(f) < 2**53 else f


def _err(where: str, e: BaseException) -> str:
    """One line: where, exception, and HTA's failing source line (bare asserts say nothing)."""
    tb = [f for f in traceback.extract_tb(e.__traceback__) if f"{os.sep}hta{os.sep}" in f.filename]
    src = (
        f" at hta/{tb[-1].filename.rsplit(f'{os.sep}hta{os.sep}', 1)[1]}:{tb[-1].lineno} `{tb[-1].line}`"
        if tb
        else ""
    )
    return f"{where}: {type(e).__name__}: {e}{src}"


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _analyze_one(trace_path: str) -> dict[str, Any]:
    """Child-process body: load one trace with HTA and compute every metric."""
    import logging

    import pandas as pd
    from hta.configs.config import logger as hta_logger
    from hta.trace_analysis import TraceAnalysis
    from hta.utils.utils import get_kernel_type

    hta_logger.setLevel(logging.ERROR)
    out: dict[str, Any] = {"ranks": {}, "error": None}
    out["import_rss_mb"] = round(_rss_mb(), 1)
    with tempfile.TemporaryDirectory(prefix="hta-ref-") as d:
        os.symlink(os.path.abspath(trace_path), os.path.join(d, os.path.basename(trace_path)))
        t0 = time.perf_counter()
        try:
            ta = TraceAnalysis(trace_dir=d)
        except Exception as e:  # HTA asserts / raises on some traces: record it
            out["load_s"] = round(time.perf_counter() - t0, 3)
            out["error"] = _err("load", e)
            out["traceback_tail"] = traceback.format_exc().strip().splitlines()[-4:]
            return out
        out["load_s"] = round(time.perf_counter() - t0, 3)
        out["load_peak_rss_mb"] = round(_rss_mb(), 1)

    t = ta.t
    sym = t.symbol_table.get_sym_table()
    sym_id = t.symbol_table.get_sym_id_map()
    step_syms = [k for k in sym_id if "ProfilerStep" in k]
    out["profiler_step_symbols"] = len(step_syms)
    # _filter_irrelevant_gpu_kernels only runs with >= 2 distinct ProfilerStep names.
    out["last_step_filter_applied"] = len(step_syms) > 1
    out["min_ts_us"] = _num(t.min_ts)
    errors: list[str] = []

    for rank in t.get_ranks():
        r: dict[str, Any] = {}
        df = t.get_trace(rank)
        gpu = df[df["stream"].ne(-1)]
        r["events_kept"] = int(len(df))
        r["gpu_events_stream_ne_minus1"] = int(len(gpu))
        r["gpu_events_by_cat"] = {
            str(sym[c]): int(n) for c, n in gpu["cat"].value_counts().sort_index().items()
        }
        r["gpu_events_by_kernel_type"] = {
            str(k): int(n)
            for k, n in gpu["name"].map(lambda i: get_kernel_type(sym[i])).value_counts().items()
        }
        if len(gpu):
            end = gpu["ts"] + gpu["dur"]
            # back in the trace's own time base (HTA subtracts min_ts of all events)
            r["window_start_us"] = _num(gpu["ts"].min() + t.min_ts)
            r["window_end_us"] = _num(end.max() + t.min_ts)

        try:
            tb = ta.get_temporal_breakdown(visualize=False)
            row = tb[tb["rank"] == rank].iloc[0]
            r["temporal"] = {
                "idle_time_us": _num(row["idle_time(us)"]),
                "compute_time_us": _num(row["compute_time(us)"]),
                "non_compute_time_us": _num(row["non_compute_time(us)"]),
                "kernel_time_us": _num(row["kernel_time(us)"]),
                "idle_time_pct": _num(row["idle_time_pctg"]),
                "compute_time_pct": _num(row["compute_time_pctg"]),
                "non_compute_time_pct": _num(row["non_compute_time_pctg"]),
            }
        except Exception as e:
            r["temporal"] = None
            errors.append(_err(f"temporal rank {rank}", e))

        try:
            idle_df, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
            streams = []
            for s, g in idle_df.groupby("stream", sort=True):
                by = dict(zip(g["idle_category"], g["idle_time"], strict=True))
                streams.append(
                    {
                        "stream": int(s),
                        "host_wait_us": _num(by.get("host_wait", 0.0)),
                        "kernel_wait_us": _num(by.get("kernel_wait", 0.0)),
                        "other_us": _num(by.get("other", 0.0)),
                    }
                )
            r["idle"] = streams
        except Exception as e:
            r["idle"] = None
            errors.append(_err(f"idle rank {rank}", e))

        try:
            ov = ta.get_comm_comp_overlap(visualize=False)
            r["overlap_pct"] = _num(ov[ov["rank"] == rank]["comp_comm_overlap_pctg"].iloc[0])
        except Exception as e:
            r["overlap_pct"] = None
            errors.append(_err(f"overlap rank {rank}", e))

        try:
            ktype, kall = ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
            r["kernel_type_breakdown"] = [
                {
                    "kernel_type": str(x["kernel_type"]),
                    "sum_us": _num(x["sum"]),
                    "pct": _num(x["percentage"]),
                }
                for _, x in ktype.iterrows()
            ]
            kall = kall[kall["rank"] == rank].sort_values("sum (us)", ascending=False)
            r["top_kernels"] = [
                {
                    "kernel_type": str(x["kernel_type"]),
                    "name": str(x["name"])[:200],
                    "sum_us": _num(x["sum (us)"]),
                    "mean_us": _num(x["mean (us)"]),
                    "min_us": _num(x["min (us)"]),
                    "max_us": _num(x["max (us)"]),
                }
                for _, x in kall.head(10).iterrows()
            ]
        except Exception as e:
            r["kernel_type_breakdown"] = None
            errors.append(_err(f"kernel_breakdown rank {rank}", e))

        out["ranks"][str(rank)] = r

    if errors:
        out["error"] = "; ".join(errors)
    out["pandas_version"] = pd.__version__
    return out


def _run_child(trace: Path, timeout_s: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run _analyze_one in a child; peak RSS of exactly that child via wait4."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        res_path = f.name
    cmd = [sys.executable, __file__, "--child", str(trace), "--child-out", res_path]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
    )
    deadline = t0 + timeout_s
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, ru = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    try:
        res = json.loads(Path(res_path).read_text())
    except (OSError, json.JSONDecodeError):
        res = {"ranks": {}, "error": f"child exit {proc.returncode}: {stderr.strip()[-500:]}"}
    finally:
        Path(res_path).unlink(missing_ok=True)
    res["peak_rss_mb"] = round(ru.ru_maxrss / 1024.0, 1)
    res["child_wall_s"] = round(wall, 3)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        res = _analyze_one(args.child)
        Path(args.child_out).write_text(json.dumps(res))
        return

    from importlib.metadata import version

    report: dict[str, Any] = {
        "hta_version": version("HolisticTraceAnalysis"),
        "pandas_version": version("pandas"),
        "numpy_version": version("numpy"),
        "python_version": sys.version.split()[0],
        "generated_by": "tools/hta_reference.py",
        "notes": (
            "HTA defaults: TraceAnalysis(trace_dir) with include_last_profiler_step=False, "
            "get_idle_time_breakdown(consecutive_kernel_delay=30) per rank present in the file. "
            "Times are HTA's: integer us after ceil(ts)/floor(ts+dur) rounding of float traces. "
            "window_*_us are in the trace's own time base. no_ns_rounding: the same run with "
            "HTA_DISABLE_NS_ROUNDING=1 (float us kept). See docs/hta-parity.md."
        ),
        "traces": {},
    }
    traces = sorted(p for p in args.traces.iterdir() if p.name.endswith((".json", ".json.gz")))
    for p in traces:
        print(f"{p.name} ...", file=sys.stderr, flush=True)
        res = _run_child(p, args.timeout_s, {"HTA_DISABLE_NS_ROUNDING": "0"})
        res.pop("pandas_version", None)
        # Same analyses on the float us timestamps HTA would otherwise ceil/floor: the numbers
        # an exact (ns) implementation of HTA's definitions should reproduce.
        exact = _run_child(p, args.timeout_s, {"HTA_DISABLE_NS_ROUNDING": "1"})
        res["no_ns_rounding"] = {"ranks": exact["ranks"], "error": exact["error"]}
        report["traces"][p.name] = res
        print(
            f"  load_s={res.get('load_s')} peak_rss_mb={res['peak_rss_mb']} error={res['error']}",
            file=sys.stderr,
            flush=True,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
