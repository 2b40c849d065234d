"""The Nsight Compute section of every report: one row per profiled launch with its verdict
(``AnalysisResult.kernel_verdicts``, analysis.ncu.kernel_table), and the verdict of the profiled
kernel beside a timeline kernel of the same name."""

from __future__ import annotations

from typing import Any

from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.report._common import fmt_ns, fmt_pct

HEADERS = ("Kernel", "Grid", "Block", "Nsight Compute", "Timeline", "Occupancy", "Top stall",
           "Verdict", "Findings")


def rows(result: AnalysisResult) -> list[dict[str, Any]]:
    """The table's rows as display text (not escaped: each writer escapes for its format)."""
    table = result.kernel_verdicts
    if table is None or table.is_empty():
        return []
    out = []
    for r in table.sort("timeline_ns", "ncu_ns", descending=True).to_dicts():
        occ = fmt_pct(r.get("achieved_occupancy_pct"))
        if r.get("occupancy_limiter") and (r.get("theoretical_occupancy_pct") or 100) < 100:
            occ += f" ({r['occupancy_limiter']})"
        stall = r.get("top_stall") or "–"
        if r.get("top_stall_cycles") is not None and r.get("top_stall"):
            stall += f" {r['top_stall_cycles']:.1f}"
        timeline = (f"{fmt_ns(r['timeline_ns'])} ({r['timeline_launches']}x)"
                    if r.get("timeline_launches") else "not in the timeline")
        out.append({
            "Kernel": r["kernel"], "Grid": r["grid"], "Block": r["block"],
            "Nsight Compute": fmt_ns(r.get("ncu_ns")), "Timeline": timeline,
            "Occupancy": occ, "Top stall": stall, "Verdict": r["verdict"],
            "Findings": r.get("findings") or "–", "ncu_rules": r.get("ncu_rules") or "",
        })
    return out


def verdict_by_name(result: AnalysisResult) -> dict[str, str]:
    """Timeline kernel name -> the verdict of its profiled launch (the one with the most
    timeline time), for the top-kernels tables."""
    table = result.kernel_verdicts
    if table is None or table.is_empty():
        return {}
    out: dict[str, str] = {}
    for r in table.sort("timeline_ns", descending=True).to_dicts():
        name = r.get("timeline_name")
        if name and name not in out:
            found = f"; {r['findings']}" if r.get("findings") else ""
            out[name] = r["verdict"] + found
    return out


def summary(result: AnalysisResult) -> str:
    """One line: how many launches were profiled and matched."""
    table = result.kernel_verdicts
    if table is None:
        return ""
    matched = int((table["timeline_launches"] > 0).sum())
    near = int(table["near_roofline"].sum())
    launches = "1 profiled launch" if table.height == 1 else f"{table.height} profiled launches"
    return (f"{launches}, {matched} matched to the timeline's kernels (by name, grid and "
            f"block); {near} near the roofline")
