"""Nsight Compute's profiled launches judged against their roofline and matched to the
timeline: the figures the kernel rules and the reports share (docs/metrics.md, "Nsight Compute
kernel figures").

:func:`judge_kernels` adds to ``kernel_metrics`` (one row per profiled launch):

- ``compute_pct``: the busiest FLOP pipe (FP32, FP64, FP16 or tensor) as % of its peak;
  ``memory_pct``: DRAM bandwidth as % of its peak. Their times (``compute_ns``,
  ``memory_ns``: the duration x the %) are the kernel's time at each roof; ``bound_ns``, the
  larger, is its time at the roofline bound, and ``bound`` says which ("compute" or "memory").
- ``roofline_pct``: ``bound_ns`` / duration. A kernel is **near its roofline**
  (:data:`NEAR_ROOFLINE_PCT`) when it reaches 80% of it, or, compute-bound, when an SM pipe is
  80% busy (Nsight Compute's SM Speed of Light: a kernel bound by integer or load/store issue
  is at its compute roof too). Memory-bound kernels are judged by DRAM alone: an L1 or L2 made
  busy by bank conflicts or uncoalesced sectors is waste, not a roof. A kernel near its
  roofline is reported as such (``verdict``) and no kernel rule judges it.
- ``waves``: blocks / (blocks a SM holds x SMs), exact (Nsight Compute prints 2 decimals).
- ``timeline_ns``, ``timeline_launches``, ``timeline_name``: the time, launches and name of the
  same kernel in the analyzed timeline (same
  :func:`~traceanalyzer.ingest.ncu.csvpage.function_name`, grid and block; shared among the
  profiled launches of that key). A rule's impact is each kernel's lost share of its Nsight
  Compute duration times ``timeline_ns``. For a report analyzed alone, the timeline is its
  launches back to back.
"""

from __future__ import annotations

from typing import Any

import polars as pl

#: A kernel at this share of its roofline (or, compute-bound, with an SM pipe this busy) is near
#: it: Nsight Compute's own "Speed of Light" rule calls 80% of peak good utilisation.
NEAR_ROOFLINE_PCT = 80.0
KEY = ["function", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
STALLS = (
    "long_scoreboard",
    "short_scoreboard",
    "barrier",
    "membar",
    "mio_throttle",
    "lg_throttle",
    "tex_throttle",
    "math_pipe_throttle",
    "wait",
    "not_selected",
    "no_instruction",
    "branch_resolving",
    "dispatch_stall",
    "drain",
    "imc_miss",
    "sleeping",
    "gmma",
    "misc",
)


def judge_kernels(km: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """``kernel_metrics`` with the roofline, the verdict and the timeline time (module doc);
    ``gpu``: the analyzed timeline's GPU activity."""
    c = pl.col
    dur = c("duration_ns").cast(pl.Float64)
    compute_pct = pl.max_horizontal(
        "fp32_pipe_pct", "fp64_pipe_pct", "fp16_pipe_pct", "tensor_pipe_pct"
    )
    memory_pct = pl.coalesce(
        "dram_throughput_pct", 100 * c("dram_bytes_per_s") / c("dram_peak_bytes_per_s")
    )
    blocks = c("grid_x").cast(pl.Int64) * c("grid_y") * c("grid_z")
    per_sm = pl.min_horizontal(
        "block_limit_registers",
        "block_limit_shared_mem",
        "block_limit_warps",
        "block_limit_sm",
        "block_limit_barriers",
    )
    # Without the FLOP counters (a details page) there is no roofline: no bound is claimed.
    known = compute_pct.is_not_null() & memory_pct.is_not_null()
    out = (
        km.filter(c("duration_ns") > 0)
        .with_columns(
            compute_ns=pl.when(known).then(dur * compute_pct / 100),
            memory_ns=pl.when(known).then(dur * memory_pct / 100),
            waves=blocks / (per_sm.cast(pl.Float64) * c("sm_count")),
        )
        .with_columns(
            bound_ns=pl.max_horizontal("compute_ns", "memory_ns"),
            bound=pl.when(c("compute_ns") >= c("memory_ns"))
            .then(pl.lit("compute"))
            .when(c("compute_ns") < c("memory_ns"))
            .then(pl.lit("memory")),
        )
        .with_columns(roofline_pct=100 * c("bound_ns") / dur)
    )
    sol = pl.max_horizontal("sm_throughput_pct", "dram_throughput_pct")
    near = (
        (c("roofline_pct") >= NEAR_ROOFLINE_PCT)
        | ((c("bound") == "compute") & (c("sm_throughput_pct") >= NEAR_ROOFLINE_PCT))
        | (c("bound").is_null() & (sol >= NEAR_ROOFLINE_PCT))
    )
    out = out.with_columns(near_roofline=near.fill_null(False))
    pct = c("roofline_pct").round(0).cast(pl.Int64)
    sm = c("sm_throughput_pct").round(0).cast(pl.Int64)
    dram = c("dram_throughput_pct").round(0).cast(pl.Int64)
    out = out.with_columns(
        verdict=pl.when(c("bound").is_null())
        .then(
            pl.format(
                "{}: SM {}% busy, DRAM {}% (no FLOP counts: no roofline)",
                pl.when("near_roofline")
                .then(pl.lit("near its peak"))
                .otherwise(pl.lit("below its peak")),
                sm,
                dram,
            )
        )
        .when(c("roofline_pct") >= NEAR_ROOFLINE_PCT)
        .then(pl.format("near its {} roofline ({}%)", "bound", pct))
        .when("near_roofline")
        .then(pl.format("at its compute roof: SM {}% busy ({}% of the FLOP roofline)", sm, pct))
        .otherwise(pl.format("{}-bound at {}% of its roofline", "bound", pct))
    )
    stalls = [c(f"stall_{s}") for s in STALLS]
    names = [pl.lit(s) for s in STALLS]
    top = pl.max_horizontal(stalls)
    reason: Any = pl.when(top.is_null() | (top <= 0)).then(None)
    for s, n in zip(stalls, names, strict=True):
        reason = reason.when(s == top).then(n)
    out = out.with_columns(top_stall=reason, top_stall_cycles=top)
    return _with_timeline(out, gpu)


def _with_timeline(km: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    from traceanalyzer.ingest.ncu.csvpage import function_name

    gpu = gpu.filter(pl.col("kind") == "kernel")
    per_name = gpu.group_by("name", *KEY[1:]).agg(
        timeline_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(), timeline_launches=pl.len()
    )
    names = per_name["name"].unique().to_list()  # distinct names: a few hundred at most
    fn = {n: function_name(n) for n in names if n is not None}
    per_key = (
        per_name.with_columns(function=pl.col("name").replace_strict(fn, default=None))
        .group_by(KEY)
        .agg(
            pl.col("timeline_ns").sum(),
            pl.col("timeline_launches").sum(),
            timeline_name=pl.col("name").sort_by("timeline_ns", descending=True).first(),
        )
    )
    out = km.join(per_key, on=KEY, how="left", nulls_equal=True)
    shared = pl.len().over(KEY)
    return out.with_columns(
        timeline_ns=(pl.col("timeline_ns").fill_null(0) / shared).cast(pl.Int64),
        timeline_launches=pl.col("timeline_launches").fill_null(0),
    ).sort("id")


#: The columns of the per-kernel table the reports show (``AnalysisResult.kernel_verdicts``).
TABLE_COLUMNS = (
    "id",
    "kernel",
    "function",
    "grid",
    "block",
    "registers",
    "shared_mem",
    "ncu_ns",
    "timeline_ns",
    "timeline_launches",
    "timeline_name",
    "bound",
    "roofline_pct",
    "sm_throughput_pct",
    "memory_throughput_pct",
    "dram_throughput_pct",
    "achieved_occupancy_pct",
    "theoretical_occupancy_pct",
    "occupancy_limiter",
    "global_load_efficiency_pct",
    "local_bytes",
    "top_stall",
    "top_stall_cycles",
    "flop_per_s",
    "arithmetic_intensity",
    "near_roofline",
    "verdict",
    "findings",
    "ncu_rules",
)


def kernel_table(
    verdicts: pl.DataFrame, findings: list[Any], ncu_rules: list[dict[str, Any]] | None = None
) -> pl.DataFrame:
    """One row per profiled launch for the reports: its launch, its figures, the verdict, the
    kernel rules that named it (``findings``: their slugs) and Nsight Compute's own rules that
    fired on it (``ncu_rules``: OPT rules with their estimated speedup, from the details page or
    a report)."""
    named: dict[tuple[str, str, str], list[str]] = {}
    for f in findings:
        for row in f.evidence:
            if "ncu_us" in row and "kernel" in row:
                key = (str(row["kernel"]), str(row.get("grid")), str(row.get("block")))
                named.setdefault(key, []).append(f.slug)
    theirs: dict[int, list[str]] = {}
    for r in ncu_rules or []:
        if r.get("type") == "OPT" and isinstance(r.get("id"), int):
            speed = r.get("speedup_pct")
            text = str(r.get("rule")) + (f" {speed:.0f}%" if isinstance(speed, float) else "")
            if text not in theirs.setdefault(r["id"], []):
                theirs[r["id"]].append(text)
    c = pl.col
    table = verdicts.select(
        "id",
        c("name").alias("kernel"),
        "function",
        pl.format("({}, {}, {})", "grid_x", "grid_y", "grid_z").alias("grid"),
        pl.format("({}, {}, {})", "block_x", "block_y", "block_z").alias("block"),
        "registers",
        "shared_mem",
        c("duration_ns").alias("ncu_ns"),
        *TABLE_COLUMNS[8:27],
    )
    keys = list(zip(table["kernel"], table["grid"], table["block"], strict=True))
    ids = table["id"].to_list()
    return table.with_columns(
        findings=pl.Series([", ".join(named.get(k, [])) for k in keys], dtype=pl.String),
        ncu_rules=pl.Series(
            ["; ".join(theirs.get(i, [])) if i is not None else "" for i in ids], dtype=pl.String
        ),
    ).select(TABLE_COLUMNS)
