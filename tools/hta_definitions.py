"""HTA 0.5.0's temporal / idle / overlap definitions, restated with the standard library only.

An executable version of docs/hta-parity.md: it reads a Kineto trace itself (no HTA, no
pandas) and recomputes what HTA reports, so the written definitions can be checked against
tests/reference/hta_reference.json:

    python tools/hta_definitions.py [--no-ns-rounding] TRACE...       # print numbers
    python tools/hta_definitions.py --check tests/reference/hta_reference.json

It is a specification, not a fast path: plain Python loops, small traces only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces" / "public" / "kineto"

KERNEL_WAIT_US = 30  # get_idle_time_breakdown(consecutive_kernel_delay=30), in trace units (us)
IDLE_CATS = {"kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events"}
COMM_RE = re.compile(r"^nccl.*Kernel")
MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def kernel_type(name: str) -> str:
    """hta.utils.utils.get_kernel_type (re.match: anchored at the start)."""
    if COMM_RE.match(name):
        return "COMMUNICATION"
    if MEMORY_RE.match(name):
        return "MEMORY"
    if not NOT_COMPUTE_RE.match(name):
        return "COMPUTATION"
    return "OTHER"


def _int_or_minus1(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def load_events(path: Path, ns_rounding: bool = True) -> list[dict[str, Any]]:
    """trace_parser._parse_trace_dataframe_json + _compress_df + round_down_time_stamps."""
    op = gzip.open if path.name.endswith(".gz") else open
    with op(path, "rb") as f:
        raw = json.loads(f.read())["traceEvents"]
    # HTA rounds when pandas made the ts column float64: any float ts (or a missing one).
    float_ts = any(not isinstance(e.get("ts"), int) for e in raw)
    out = []
    for idx, e in enumerate(raw):  # "index" is the position in traceEvents, before dropping
        ts, dur, cat = e.get("ts"), e.get("dur"), e.get("cat")
        if ns_rounding and float_ts and ts is not None:
            end = math.floor(ts + dur) if dur is not None else None
            ts = math.ceil(ts)
            dur = end - ts if end is not None else None
        if dur is None or cat is None or cat == "Trace":
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        out.append(
            {
                "index": idx,
                "cat": cat,
                "name": e.get("name"),
                "ts": ts,
                "dur": dur,
                "stream": _int_or_minus1(args.get("stream", -1)),
                "correlation": args.get("correlation", -1),
            }
        )
    # Trace._align_all_ranks: ts -= min ts. It changes results for float traces: HTA adds
    # dur to the *aligned* ts, while at epoch magnitude (1.7e15 us) a float64 step is 0.25 us.
    t0 = min(e["ts"] for e in out) if out else 0
    for e in out:
        e["ts"] -= t0
    return out


def is_gpu(e: dict[str, Any]) -> bool:
    """trace_filter._filter_gpu_kernels_with_cuda_sync (GPUKernelFilter)."""
    return (e["stream"] >= 0 and e["correlation"] >= 0) or e["name"] in (
        "Event Sync",
        "Context Sync",
    )


def link_and_filter(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """trace.transform_correlation_to_index, then Trace._filter_irrelevant_gpu_kernels."""
    by_corr: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        e["index_correlation"] = min(e["correlation"], 0)
        if e["correlation"] != -1 and not is_gpu(e):
            by_corr.setdefault(e["correlation"], []).append(e)
    for g in events:
        if g["correlation"] != -1 and is_gpu(g):
            for c in by_corr.get(g["correlation"], []):  # last match wins
                g["index_correlation"], c["index_correlation"] = c["index"], g["index"]

    step_names = {e["name"] for e in events if "ProfilerStep" in str(e["name"])}
    step_names |= {e["cat"] for e in events if "ProfilerStep" in str(e["cat"])}
    if len(step_names) <= 1:  # 0 or 1 step: HTA keeps everything (with a warning)
        return events
    cpu = [e for e in events if not is_gpu(e)]
    last_step_start = max(e["ts"] for e in cpu if e["name"] in step_names)
    cpu = [e for e in cpu if e["ts"] < last_step_start]
    counts: dict[Any, int] = {}
    for c in cpu:
        counts[c["correlation"]] = counts.get(c["correlation"], 0) + 1
    # inner merge on correlation: a GPU event appears once per CPU event sharing its id
    gpu = [g for g in events if is_gpu(g) for _ in range(counts.get(g["correlation"], 0))]
    return gpu + cpu


def merge(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """utils.merge_kernel_intervals: sort by ts, start a new group when ts > max end so far."""
    groups: list[list[float]] = []
    run_max = -math.inf
    for ts, end in sorted(iv):
        if groups and not ts > run_max:
            groups[-1][1] = max(groups[-1][1], end)
        else:
            groups.append([ts, end])
        run_max = max(run_max, end)
    return [(a, b) for a, b in groups]


def temporal(events: list[dict[str, Any]]) -> dict[str, float]:
    """BreakdownAnalysis.get_temporal_breakdown for one rank."""
    gpu = [e for e in events if e["stream"] != -1]  # note: any event with args.stream
    all_m = merge([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    comp_m = merge(
        [(e["ts"], e["ts"] + e["dur"]) for e in gpu if kernel_type(e["name"]) == "COMPUTATION"]
    )
    span = all_m[-1][1] - all_m[0][0]
    busy = sum(b - a for a, b in all_m)
    compute = sum(b - a for a, b in comp_m)
    return {
        "kernel_time_us": span,
        "idle_time_us": span - busy,
        "compute_time_us": compute,
        "non_compute_time_us": busy - compute,  # HTA asserts this is >= 0
    }


def idle_by_stream(events: list[dict[str, Any]]) -> list[dict[str, float]]:
    """BreakdownAnalysis.get_idle_time_breakdown + _analyze_idle_time_for_stream."""
    ts_by_index = {e["index"]: e["ts"] for e in events}
    ops = [e for e in events if e["stream"] != -1 and e["cat"] in IDLE_CATS]
    out = []
    for s in sorted({e["stream"] for e in ops}):
        # pandas sorts with an unstable quicksort: ties in ts may come out in another order
        s_ops = sorted((e for e in ops if e["stream"] == s), key=lambda e: e["ts"])
        acc = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
        for prev, cur in zip(
            s_ops, s_ops[1:], strict=False
        ):  # the first op's gap is NaN: counted nowhere
            prev_end = prev["ts"] + prev["dur"]
            gap = cur["ts"] - prev_end  # may be negative; summed as is
            launch_ts = ts_by_index.get(cur["index_correlation"])  # 0 -> event #0 (quirk)
            if launch_ts is not None and launch_ts > prev_end:
                acc["host_wait"] += gap
            elif gap < KERNEL_WAIT_US:
                acc["kernel_wait"] += gap
            else:
                acc["other"] += gap
        out.append({"stream": s, **{f"{k}_us": round(v, 2) for k, v in acc.items()}})
    return out


def overlap_pct(events: list[dict[str, Any]]) -> float | None:
    """CommunicationAnalysis.get_comm_comp_overlap: |comp ∩ comm| / |comm| * 100."""
    gpu = [e for e in events if e["stream"] != -1]
    comp = merge(
        [(e["ts"], e["ts"] + e["dur"]) for e in gpu if kernel_type(e["name"]) == "COMPUTATION"]
    )
    comm = merge(
        [(e["ts"], e["ts"] + e["dur"]) for e in gpu if kernel_type(e["name"]) == "COMMUNICATION"]
    )
    total = sum(b - a for a, b in comm)
    if not total:
        return None  # HTA: 0/0 -> NaN
    inter, i, j = 0.0, 0, 0
    while i < len(comp) and j < len(comm):
        lo, hi = max(comp[i][0], comm[j][0]), min(comp[i][1], comm[j][1])
        inter += max(0.0, hi - lo)
        if comp[i][1] < comm[j][1]:
            i += 1
        else:
            j += 1
    return round(100 * inter / total, 2)


def analyze(path: Path, ns_rounding: bool = True) -> dict[str, Any]:
    ev = link_and_filter(load_events(path, ns_rounding))
    res: dict[str, Any] = {"idle": idle_by_stream(ev), "overlap_pct": overlap_pct(ev)}
    try:
        res["temporal"] = temporal(ev)
    except IndexError:  # no GPU event: HTA raises too
        res["temporal"] = None
    return res


def _close(a: Any, b: Any, rel: float = 1e-6, abs_: float = 0.02) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def check(ref_path: Path, traces: Path) -> int:
    ref = json.loads(ref_path.read_text())
    bad = 0
    for name, tr in ref["traces"].items():
        for variant, src, rounding in (
            ("rounded", tr, True),
            ("no_ns_rounding", tr.get("no_ns_rounding", {}), False),
        ):
            for rank, r in src.get("ranks", {}).items():
                mine = analyze(traces / name, rounding)
                diffs = []
                if r.get("temporal"):
                    diffs += [
                        k for k, v in mine["temporal"].items() if not _close(v, r["temporal"][k])
                    ]
                if r.get("idle") is not None:
                    want = {s["stream"]: s for s in r["idle"]}
                    got = {s["stream"]: s for s in mine["idle"]}
                    if set(want) != set(got):
                        diffs.append("idle streams")
                    for s in want.keys() & got.keys():
                        diffs += [
                            f"idle[{s}].{k}"
                            for k in ("host_wait_us", "kernel_wait_us", "other_us")
                            if not _close(got[s][k], want[s][k])
                        ]
                if not _close(mine["overlap_pct"], r.get("overlap_pct")):
                    diffs.append("overlap_pct")
                status = "ok" if not diffs else "DIFF " + ", ".join(diffs)
                bad += bool(diffs)
                print(f"{name} [{variant}] rank {rank}: {status}")
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--no-ns-rounding", action="store_true")
    ap.add_argument("--check", type=Path, help="compare with a reference JSON")
    ap.add_argument("--trace-dir", type=Path, default=TRACES)
    a = ap.parse_args()
    if a.check:
        sys.exit(check(a.check, a.trace_dir))
    for p in a.traces:
        print(json.dumps({p.name: analyze(p, not a.no_ns_rounding)}, indent=1))


if __name__ == "__main__":
    main()
