"""What-if: the step time re-computed on the dependency graph with a finding's problem fixed
(docs/critical-path.md, "What-if").

Each rule with a model here turns its finding into a :class:`~critical_path.Change` of the graph
the way the rule's fix says (a sync no longer waits, a chain of kernels becomes one, a step is
replayed as a CUDA graph, ...); :func:`critical_path.replay` then gives the step times with it.
Every model is the same for every trace: no constant is fitted to a workload. Rules whose fix is
not one change (``gpu-idle-gaps``, ``low-gpu-utilization``: symptoms with several causes) or
that cost no time (``memory-near-capacity``, ``startup-time``) get no prediction, and say why.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from traceanalyzer.analysis.critical_path import Change, Graph, Replay, replay, step_time_ns

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views
    from traceanalyzer.findings import Finding

#: The share of a GPU's peak a well-tuned kernel reaches, for kernels re-timed from the
#: roofline: dense BF16 GEMMs reach 60-75% of the H100/H200 datasheet peak in cuBLAS (NVIDIA's
#: published cuBLAS benchmarks), streaming kernels 80-90% of HBM bandwidth (STREAM-like copies).
ACHIEVABLE_COMPUTE = 0.7
ACHIEVABLE_BANDWIDTH = 0.8
#: A fused optimizer (``fused=True``) moves each parameter's tensors through HBM once; the
#: per-parameter path runs about a dozen elementwise kernels per parameter, each moving two or
#: three tensors: a quarter of the traffic, so a quarter of the GPU time.
FUSED_OPTIMIZER_SHARE = 0.25
#: Micro-batches a pipelined split model runs per step: GPipe's rule of thumb, 4 per stage, for
#: a bubble under 20%.
MICRO_BATCHES_PER_STAGE = 4

#: What each prediction assumes, said in the report and the JSON.
ASSUMES: dict[str, str] = {
    "hidden-sync": "the host no longer waits at the synchronizations (the value is read a step "
    "later); the GPU work and the copies stay",
    "sync-memcpy": "the blocking copies and memsets become asynchronous, from pinned memory at "
    "the host link's practical bandwidth; the host no longer waits at them",
    "pageable-memcpy": "the pageable copies come from pinned memory at the host link's "
    "practical bandwidth and no longer block the host",
    "memcpy-bound": "the copies run at the host link's practical bandwidth",
    "allocator-churn": "the allocation and free calls are gone (memory is reused), and with "
    "them the waits they impose",
    "dataloader-stall": "data loading overlaps the step (workers, prefetching): its host time "
    "leaves the critical path",
    "launch-overhead-bound": "each flagged step is replayed as one CUDA graph: one launch, the "
    "host work between its launches gone, the kernels back to back at "
    "the GPU's own gap between kernels",
    "unfused-elementwise-chain": "each chain becomes one kernel moving the chain's fused HBM "
    "traffic at the bandwidth the chain reached",
    "unfused-attention": "each attention block becomes one fused kernel: its GEMM FLOPs at "
    f"{ACHIEVABLE_COMPUTE:.0%} of the BF16 peak where the shapes are "
    "recorded; else the score kernels are gone and the GEMMs stay",
    "unfused-optimizer": "the optimizer runs fused: its host time between launches is gone and "
    f"its kernels take {FUSED_OPTIMIZER_SHARE:.0%} of their time",
    "small-grid": "each small grid is filled: the kernel's time scales with blocks / SMs",
    "fp32-matmul": "the FP32/TF32 GEMMs run at BF16 speed: their time scaled by the ratio of "
    "the device's FP32 (or TF32) and BF16 peaks",
    "small-batch-matmul": "the small-M GEMMs of one step that run one kernel over the same "
    "weights are batched into one kernel taking the longest one's time; "
    "the other calls' launches and the host work that issued them are "
    "gone",
    "odd-matmul-shape": "the unaligned GEMMs run as fast as aligned ones: the rule's own "
    "expected gain per kernel",
    "gemm-below-roofline": f"the slow GEMMs reach {ACHIEVABLE_COMPUTE:.0%} of their roofline",
    "memory-bound-below-bandwidth": "the slow memory-bound operators' kernels move their bytes at "
    "the reachable HBM bandwidth: each operator's kernels lose the rule's lost time, in "
    "proportion to their durations",
    "nccl-not-overlapped": "each collective's exposed transfer overlaps compute (bucketed "
    "all-reduce during backward), without slowing it",
    "collective-wait": "the ranks are balanced: each collective's wait for the other ranks is gone",
    "gpus-take-turns": f"the split model is pipelined with {MICRO_BATCHES_PER_STAGE} "
    "micro-batches per GPU: a step takes the busiest GPU's time times "
    "(micro-batches + GPUs - 1) / micro-batches",
}
#: Why a rule gets no prediction.
NO_MODEL: dict[str, str] = {
    "gpu-idle-gaps": "a symptom with several causes; the findings of its causes carry predictions",
    "low-gpu-utilization": "a symptom with several causes; the findings of its causes carry "
    "predictions",
    "startup-time": "outside the steps",
    "memory-near-capacity": "a risk, not lost time",
}

Model = Callable[["Context", "Finding", "pl.DataFrame | None"], "Change | None"]


@dataclass
class Context:
    """What the models read: the graph and the views."""

    graph: Graph
    views: Views

    @property
    def gpu(self) -> pl.DataFrame:
        return self.graph.gpu

    def durations(self) -> np.ndarray:
        return (self.graph.g_end - self.graph.g_start).copy()

    def gpu_in(self, rows: pl.DataFrame) -> np.ndarray:
        """GPU activities (graph indices) inside the evidence rows' [start_ns, end_ns] on their
        stream (every stream where the row names none), and their row number."""
        if rows.is_empty() or "start_ns" not in rows.columns:
            return np.zeros((0, 2), np.int64)
        acts = self.gpu.select("_g", "stream", "start_ns", "end_ns")
        r = rows.select(
            pl.col("start_ns").alias("_lo"),
            pl.col("end_ns").alias("_hi"),
            *(["stream"] if "stream" in rows.columns else []),
        ).with_row_index("_row")
        r = r.with_columns(pl.col("_lo").cast(pl.Int64), pl.col("_hi").cast(pl.Int64))
        left, right = acts.sort("start_ns"), r.sort("_lo")
        if "stream" in rows.columns:
            joined = left.join_asof(
                right,
                left_on="start_ns",
                right_on="_lo",
                by="stream",
                strategy="backward",
                check_sortedness=False,
            )
        else:
            joined = left.join_asof(right, left_on="start_ns", right_on="_lo", strategy="backward")
        hit = joined.filter(pl.col("end_ns") <= pl.col("_hi"))
        return np.column_stack(
            (hit["_g"].to_numpy().astype(np.int64), hit["_row"].to_numpy().astype(np.int64))
        )

    def named(self, names: list[str]) -> np.ndarray:
        return self.gpu["name"].is_in(names).to_numpy()

    def calls_named(self, pattern: str) -> np.ndarray:
        return self.graph.calls["name"].str.contains(pattern).to_numpy()


# --- the models -------------------------------------------------------------------------------


def _unblock(ctx: Context, mask: np.ndarray) -> Change:
    return Change(unblock=mask & (ctx.graph.c_wait >= 0))


def _hidden_sync(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    from traceanalyzer.rules.detectors.hidden_sync import SYNC_API

    mask = ctx.calls_named(SYNC_API)
    reads = ctx.gpu.filter(
        pl.col("kind") == "memcpy",
        pl.col("copy_kind") == "DtoH",
        pl.col("dst_kind") == "pageable",
        pl.col("_c").is_not_null(),
    )
    mask[reads["_c"].to_numpy()] = True
    return _unblock(ctx, mask)


def _pinned_gbps(ctx: Context) -> float:
    from traceanalyzer.devices import host_link
    from traceanalyzer.rules.detectors._common import analyzed_device

    return float(host_link(analyzed_device(ctx.views)).practical_gbps)


def _copies_pinned(ctx: Context, sel: np.ndarray) -> Change:
    """The selected copies at the host link's bandwidth, their launch calls no longer blocking."""
    dur = ctx.durations()
    nbytes = ctx.gpu["bytes"].fill_null(0).to_numpy().astype(np.float64)
    host = (
        ctx.gpu["copy_kind"]
        .cast(pl.String)
        .is_in(["HtoD", "DtoH"])
        .fill_null(False)
        .to_numpy()
        .astype(bool)
    )
    at_link = (nbytes / (_pinned_gbps(ctx) * 1e9) * 1e9).astype(np.int64)
    sel = sel & host
    dur[sel] = np.minimum(dur[sel], at_link[sel])
    calls = ctx.gpu["_c"].fill_null(-1).to_numpy().astype(np.int64)[sel]
    mask = np.zeros(ctx.graph.n_calls, bool)
    mask[calls[calls >= 0]] = True
    return Change(g_dur=dur, unblock=mask & (ctx.graph.c_wait >= 0))


def _pageable(ctx: Context) -> np.ndarray:
    kinds = [
        pl.col(c).cast(pl.String).fill_null("") == "pageable" for c in ("src_kind", "dst_kind")
    ]
    return (
        ctx.gpu.select(((pl.col("kind") == "memcpy") & (kinds[0] | kinds[1])).fill_null(False))
        .to_series()
        .to_numpy()
        .astype(bool)
    )


def _sync_memcpy(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    from traceanalyzer.rules.detectors.sync_memcpy import SYNC_COPY_API

    calls = ctx.calls_named(SYNC_COPY_API)
    launched = ctx.gpu["_c"].fill_null(-1).to_numpy()
    sel = (launched >= 0) & calls[np.maximum(launched, 0)] & _pageable(ctx)
    change = _copies_pinned(ctx, sel)
    return change.merged(_unblock(ctx, calls))


def _pageable_memcpy(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    return _copies_pinned(ctx, _pageable(ctx))


def _memcpy_bound(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None:
        return None
    sel = np.zeros(ctx.graph.n_gpu, bool)
    sel[ctx.gpu_in(ev)[:, 0]] = True
    return _copies_pinned(ctx, sel & (ctx.gpu["kind"] == "memcpy").to_numpy())


def _allocator_churn(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    from traceanalyzer.ingest.memory import ALLOCATION_APIS

    base = ctx.graph.calls["name"].str.replace(r"_v\d+$", "")
    mask = base.is_in(list(ALLOCATION_APIS)).to_numpy()
    dur = ctx.graph.c_end - ctx.graph.c_start
    return Change(c_shrink=np.where(mask, dur, 0), unblock=mask & (ctx.graph.c_wait >= 0))


def _dataloader(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    g = ctx.graph
    if not len(g.dl_lo):
        return None
    from traceanalyzer.analysis.critical_path import host_gaps_from

    gap = np.maximum(g.c_start - host_gaps_from(g.c_start, g.c_end, g.first_at), 0)
    return Change(gap_shrink=(gap * g.c_dl).astype(np.int64))


def _graph_replay(ctx: Context, steps: list[int]) -> Change | None:
    """The steps replayed as CUDA graphs: every activity of a step ready at its first launch,
    the host work from the first launch to the last gone."""
    g = ctx.graph
    in_steps = np.isin(g.g_step, np.array(steps, dtype=np.int64)) & (g.g_launch >= 0)
    if not in_steps.any():
        return None
    frame = (
        pl.DataFrame({"step": g.g_step[in_steps], "c": g.g_launch[in_steps]})
        .group_by("step")
        .agg(first=pl.col("c").min(), last=pl.col("c").max())
    )
    first_of = dict(zip(frame["step"].to_list(), frame["first"].to_list(), strict=True))
    ready = np.full(g.n_gpu, -1, np.int64)
    idx = np.nonzero(in_steps)[0]
    ready[idx] = pl.Series(g.g_step[idx]).replace_strict(first_of).to_numpy()
    shrink = np.zeros(g.n_calls, np.int64)
    gap_shrink = np.zeros(g.n_calls, np.int64)
    dur = g.c_end - g.c_start
    prev_end = np.concatenate(([g.c_start[0]], g.c_end[:-1]))
    gaps = np.maximum(g.c_start - prev_end, 0)
    for lo, hi in zip(frame["first"].to_list(), frame["last"].to_list(), strict=True):
        # (a loop over steps, not events)
        shrink[lo + 1 : hi + 1] = dur[lo + 1 : hi + 1]
        gap_shrink[lo + 1 : hi + 1] = gaps[lo + 1 : hi + 1]
    no_wait = np.zeros(g.n_calls, bool)
    for lo, hi in zip(frame["first"].to_list(), frame["last"].to_list(), strict=True):
        no_wait[lo + 1 : hi + 1] = True
    return Change(
        c_shrink=shrink,
        gap_shrink=gap_shrink,
        g_ready_call=ready,
        unblock=no_wait & (g.c_wait >= 0),
        g_gap_cap=True,
    )


def _launch_bound(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None or "step" not in ev.columns:
        return None
    return _graph_replay(ctx, [int(s) for s in ev["step"].drop_nulls().to_list()])


def _scale_rows(
    ctx: Context, ev: pl.DataFrame | None, factor: pl.Expr, *, one_kernel: bool = False
) -> Change | None:
    """The activities inside each evidence row scaled by the row's ``factor``; with
    ``one_kernel``, the row's activities become one (the first takes the row's new time)."""
    if ev is None or ev.is_empty():
        return None
    hits = ctx.gpu_in(ev)
    if not len(hits):
        return None
    f = ev.select(factor.clip(0.0, 1.0).fill_null(1.0)).to_series().to_numpy()
    dur = ctx.durations()
    idx, row = hits[:, 0], hits[:, 1]
    if not one_kernel:
        dur[idx] = (dur[idx] * f[row]).astype(np.int64)
        return Change(g_dur=dur)
    total = np.bincount(row, weights=dur[idx], minlength=len(f))
    new_total = (total * f).astype(np.int64)
    firsts = pl.DataFrame({"i": idx, "r": row}).group_by("r").agg(pl.col("i").min())
    dur[idx] = 0
    dur[firsts["i"].to_numpy()] = new_total[firsts["r"].to_numpy()]
    gaps = np.zeros(ctx.graph.n_gpu, bool)
    gaps[idx] = True
    gaps[firsts["i"].to_numpy()] = False
    calls = ctx.gpu["_c"].fill_null(-1).to_numpy()[gaps]
    shrink = np.zeros(ctx.graph.n_calls, np.int64)
    cdur = ctx.graph.c_end - ctx.graph.c_start
    shrink[calls[calls >= 0]] = cdur[calls[calls >= 0]]
    return Change(g_dur=dur, g_no_gap=gaps, c_shrink=shrink)


def _elementwise(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    factor = 1.0 - pl.col("saving_us") / pl.col("run_us")
    return _scale_rows(ctx, ev, factor, one_kernel=True)


#: What tells a kernel of ``attributed_kernels`` in the graph: where and when it ran (numbers:
#: kernel names are hundreds of bytes, not worth hashing).
_KERNEL_KEYS = ["device", "stream", "start_ns", "dur_ns"]


def _kernel_flops(ctx: Context) -> np.ndarray | None:
    """Model FLOPs of each activity (graph order), where the shapes are recorded."""
    kernels = ctx.views.attributed_kernels(ctx.graph.rank)
    if kernels.is_empty():
        return None
    flops = ctx.gpu.select(*_KERNEL_KEYS[:-1], dur_ns=pl.col("end_ns") - pl.col("start_ns")).join(
        kernels.select(*_KERNEL_KEYS, "flops").unique(_KERNEL_KEYS, keep="first"),
        on=_KERNEL_KEYS,
        how="left",
        nulls_equal=True,
        maintain_order="left",
    )["flops"]
    return flops.fill_null(np.nan).to_numpy().astype(np.float64)


def _peaks(ctx: Context) -> Any:
    from traceanalyzer.devices import peaks_of
    from traceanalyzer.rules.detectors._common import analyzed_device

    return peaks_of(analyzed_device(ctx.views))


def _attention(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None or ev.is_empty():
        return None
    hits = ctx.gpu_in(ev)
    if not len(hits):
        return None
    dur = ctx.durations()
    idx, row = hits[:, 0], hits[:, 1]
    gemm = ctx.gpu["category"].cast(pl.String).is_in(["gemm", "attention"]).to_numpy()
    flops = _kernel_flops(ctx)
    peaks = _peaks(ctx)
    n_rows = ev.height
    new_total = np.bincount(row, weights=np.where(gemm[idx], dur[idx], 0), minlength=n_rows)
    if flops is not None and peaks is not None:
        fl = np.bincount(
            row, weights=np.nan_to_num(np.where(gemm[idx], flops[idx], 0)), minlength=n_rows
        )
        fused = fl / (peaks.bf16 * 1e12 * ACHIEVABLE_COMPUTE) * 1e9
        new_total = np.where(fl > 0, np.minimum(fused, new_total), new_total)
    firsts = pl.DataFrame({"i": idx, "r": row}).group_by("r").agg(pl.col("i").min())
    dur[idx] = 0
    dur[firsts["i"].to_numpy()] = new_total[firsts["r"].to_numpy()].astype(np.int64)
    others = np.zeros(ctx.graph.n_gpu, bool)
    others[idx] = True
    others[firsts["i"].to_numpy()] = False
    return Change(g_dur=dur, g_no_gap=others)


def _optimizer(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    """Each optimizer region (evidence rows: host or GPU times) runs fused: the host calls from
    the first launch of its work to the last are cut to the first, its kernels take
    FUSED_OPTIMIZER_SHARE of their time."""
    if ev is None or ev.is_empty() or "start_ns" not in ev.columns:
        return None
    g = ctx.graph
    lo = ev["start_ns"].to_numpy().astype(np.int64) - g.t0
    hi = ev["end_ns"].to_numpy().astype(np.int64) - g.t0
    order = np.argsort(lo)
    lo, hi = lo[order], hi[order]
    has = g.g_launch >= 0
    ls = np.where(has, g.c_start[np.maximum(g.g_launch, 0)], g.g_start)

    def region(t: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(lo, t, side="right") - 1
        return np.where((pos >= 0) & (t <= hi[np.maximum(pos, 0)]), pos, -1)

    # Regions are host ranges (torch.profiler's optimizer step, where recorded) or GPU ranges
    # (found from the kernels): work belongs to a region by its launch, or by its run.
    from traceanalyzer.rules.detectors._optimizer import optimizer_ranges

    host = optimizer_ranges(ctx.views).height > 0  # else the rule found them from kernels
    reg = np.where(has, region(ls), -1) if host else region(g.g_start)
    g_in = (reg >= 0) & has
    if not g_in.any():
        return None
    spans = (
        pl.DataFrame({"r": reg[g_in], "c": g.g_launch[g_in]})
        .group_by("r")
        .agg(first=pl.col("c").min(), last=pl.col("c").max())
    )
    cut = np.zeros(g.n_calls, bool)
    for first, last in zip(spans["first"].to_list(), spans["last"].to_list(), strict=True):
        cut[first + 1 : last + 1] = True  # (a loop over regions, not events)
    dur = g.c_end - g.c_start
    prev_end = np.concatenate(([g.c_start[0]], g.c_end[:-1]))
    gaps = np.maximum(g.c_start - prev_end, 0)
    gdur = ctx.durations()
    gdur[g_in] = (gdur[g_in] * FUSED_OPTIMIZER_SHARE).astype(np.int64)
    return Change(
        g_dur=gdur,
        c_shrink=np.where(cut, dur, 0),
        gap_shrink=np.where(cut, gaps, 0),
        unblock=cut & (g.c_wait >= 0),
        g_no_gap=g_in,
    )


def _small_grid(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None or "name" not in ev.columns:
        return None
    ratio = dict(
        zip(
            ev["name"].to_list(),
            (ev["blocks"] / ev["sm_count"]).clip(0.0, 1.0).to_list(),
            strict=True,
        )
    )
    factor = ctx.gpu["name"].replace_strict(ratio, default=1.0, return_dtype=pl.Float64)
    dur = ctx.durations()
    return Change(g_dur=(dur * factor.to_numpy()).astype(np.int64))


def _fp32(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    peaks = _peaks(ctx)
    if ev is None or "name" not in ev.columns or peaks is None:
        return None
    tf32 = ctx.gpu["name"].str.contains(r"(?i)tf32|s1688|s16816|s884|s161616").to_numpy()
    ratio = np.where(tf32, (peaks.tf32 or peaks.fp32) / peaks.bf16, peaks.fp32 / peaks.bf16)
    sel = ctx.named(ev["name"].to_list())
    dur = ctx.durations()
    dur[sel] = (dur[sel] * ratio[sel]).astype(np.int64)
    return Change(g_dur=dur)


def _small_batch(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None or "kernel" not in ev.columns:
        return None
    g = ctx.graph
    sel = ctx.named(ev["kernel"].drop_nulls().to_list()) & (g.g_step != np.iinfo(np.int64).min)
    if not sel.any():
        return None
    frame = ctx.gpu.select(
        "_g", "name", "grid_x", "grid_y", "grid_z", "stream", step=pl.Series(g.g_step)
    ).filter(pl.Series(sel))
    frame = frame.with_columns(d=pl.Series((g.g_end - g.g_start)[sel]))
    keys = ["step", "name", "grid_x", "grid_y", "grid_z", "stream"]
    frame = frame.with_columns(
        keep=pl.col("_g") == pl.col("_g").min().over(keys), longest=pl.col("d").max().over(keys)
    )
    dur = ctx.durations()
    idx = frame["_g"].to_numpy().astype(np.int64)
    dur[idx] = np.where(frame["keep"].to_numpy(), frame["longest"].to_numpy(), 0)
    gone = np.zeros(g.n_gpu, bool)
    gone[idx[~frame["keep"].to_numpy()]] = True
    # One call now does the work of many: the others' launches, and the host work that issued
    # them, are gone too.
    calls = g.g_launch[gone]
    issued = _issuing(g, calls[calls >= 0])
    from traceanalyzer.analysis.critical_path import host_gaps_from

    cdur = g.c_end - g.c_start
    gaps = np.maximum(g.c_start - host_gaps_from(g.c_start, g.c_end, g.first_at), 0)
    return Change(
        g_dur=dur,
        g_no_gap=gone,
        c_shrink=np.where(issued, cdur, 0),
        gap_shrink=np.where(issued, gaps, 0),
    )


def _issuing(g: Graph, launches: np.ndarray) -> np.ndarray:
    """The host calls that issued the given launch calls: each launch and the calls before it
    back to the previous call that launched GPU work or waited for it (the driver calls a
    library makes before a launch, such as cuBLAS's ``cuKernelGetAttribute``; the host work
    between them is the gap before each). Launches and waits are the boundaries: whatever
    came before the previous one issued that one."""
    boundary = np.zeros(g.n_calls, bool)
    launching = g.g_launch[g.g_launch >= 0]
    boundary[launching] = True
    boundary |= g.c_wait >= 0
    # next_boundary[j]: the first boundary call at or after j (n_calls where none is).
    idx = np.where(boundary, np.arange(g.n_calls), g.n_calls)
    next_boundary = np.minimum.accumulate(idx[::-1])[::-1]
    chosen = np.zeros(g.n_calls + 1, bool)
    chosen[launches] = True
    return chosen[next_boundary]


def _odd_shape(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None or "kernel" not in ev.columns:
        return None
    gain = f.impact_ns / max(float((ev["gpu_us"] * 1e3).sum()), 1.0)
    sel = ctx.named(ev["kernel"].to_list())
    dur = ctx.durations()
    dur[sel] = (dur[sel] * max(0.0, 1.0 - gain)).astype(np.int64)
    return Change(g_dur=dur)


def _below_roofline(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None or "roofline_pct" not in ev.columns or "op" not in ev.columns:
        return None
    # The operators' kernels, by the operator that launched them.
    factor = dict(
        zip(
            ev["op"].to_list(),
            (ev["roofline_pct"] / 100.0 / ACHIEVABLE_COMPUTE).clip(0.0, 1.0).to_list(),
            strict=True,
        )
    )
    f_ = ctx.gpu["op_name"].replace_strict(factor, default=1.0, return_dtype=pl.Float64)
    gemm = (ctx.gpu["category"] == "gemm").to_numpy()
    dur = ctx.durations()
    scaled = (dur * f_.to_numpy()).astype(np.int64)
    return Change(g_dur=np.where(gemm, scaled, dur))


def _memory_bound(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    if ev is None or ev.is_empty() or not {"op", "shape", "lost_us"} <= set(ev.columns):
        return None
    if "kernel" in ev.columns:  # judged without shapes: one kernel name and grid a row
        keys = ["name", "grid_x", "block_x"]
        factor = ev.select(
            pl.col("kernel").alias("name"),
            pl.col("grid_x").cast(pl.Int32),
            pl.col("block_x").cast(pl.Int32),
            factor=(1.0 - pl.col("lost_us") / pl.col("total_us")).clip(0.0, 1.0),
        )
        scale = (
            ctx.gpu.select(keys)
            .join(factor, on=keys, how="left", maintain_order="left")["factor"]
            .fill_null(1.0)
            .to_numpy()
        )
        return Change(g_dur=(ctx.durations() * scale).astype(np.int64))
    kernels = ctx.views.attributed_kernels(ctx.graph.rank)
    if kernels.is_empty():
        return None
    slow = ev.group_by("op", "shape").agg(lost=pl.col("lost_us").sum() * 1e3)
    rows = (
        ctx.gpu.select(*_KERNEL_KEYS[:-1], dur_ns=pl.col("end_ns") - pl.col("start_ns"))
        .with_row_index("_i")
        .join(
            kernels.select(*_KERNEL_KEYS, op="op_name", shape="input_dims").unique(
                _KERNEL_KEYS, keep="first"
            ),
            on=_KERNEL_KEYS,
            how="inner",
            nulls_equal=True,
        )
        .join(slow, on=["op", "shape"], how="inner")
    )
    if rows.is_empty():
        return None
    # Each operator's kernels lose its lost time in proportion to their durations.
    rows = rows.with_columns(
        factor=(1.0 - pl.col("lost") / pl.col("dur_ns").sum().over("op", "shape")).clip(0.0, 1.0)
    )
    dur = ctx.durations()
    idx = rows["_i"].to_numpy().astype(np.int64)
    dur[idx] = (dur[idx] * rows["factor"].to_numpy()).astype(np.int64)
    return Change(g_dur=dur)


def _nccl(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    return _scale_rows(ctx, ev, 1.0 - pl.col("exposed_us") / pl.col("duration_us"))


def _collective_wait(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    return _scale_rows(ctx, ev, 1.0 - pl.col("wait_us") / pl.col("duration_us"))


def _take_turns(ctx: Context, f: Finding, ev: pl.DataFrame | None) -> Change | None:
    g = ctx.graph
    sel = g.g_step != np.iinfo(np.int64).min
    if not sel.any():
        return None
    busy = (
        pl.DataFrame(
            {
                "step": g.g_step[sel],
                "device": ctx.gpu["device"].to_numpy()[sel],
                "d": (g.g_end - g.g_start)[sel],
            }
        )
        .group_by("step", "device")
        .agg(pl.col("d").sum())
        .group_by("step")
        .agg(total=pl.col("d").sum(), top=pl.col("d").max(), gpus=pl.len())
    )
    m = MICRO_BATCHES_PER_STAGE * busy["gpus"]
    piped = busy["top"] * (m + busy["gpus"] - 1) / m
    saving = (busy["total"] - piped).clip(lower_bound=0)
    return Change(
        step_delta_ns={
            int(s): -int(v) for s, v in zip(busy["step"].to_list(), saving.to_list(), strict=True)
        }
    )


MODELS: dict[str, Model] = {
    "hidden-sync": _hidden_sync,
    "sync-memcpy": _sync_memcpy,
    "pageable-memcpy": _pageable_memcpy,
    "memcpy-bound": _memcpy_bound,
    "allocator-churn": _allocator_churn,
    "dataloader-stall": _dataloader,
    "launch-overhead-bound": _launch_bound,
    "unfused-elementwise-chain": _elementwise,
    "unfused-attention": _attention,
    "unfused-optimizer": _optimizer,
    "small-grid": _small_grid,
    "fp32-matmul": _fp32,
    "small-batch-matmul": _small_batch,
    "odd-matmul-shape": _odd_shape,
    "gemm-below-roofline": _below_roofline,
    "memory-bound-below-bandwidth": _memory_bound,
    "nccl-not-overlapped": _nccl,
    "collective-wait": _collective_wait,
    "gpus-take-turns": _take_turns,
}


def owns(f: Finding, rank: int, headline: int | None) -> bool:
    """Whether finding ``f`` is rank ``rank``'s: its own rank, or the headline's where it names
    none (a finding of the whole trace is judged on the headline rank)."""
    owner = f.rank if f.rank is not None else headline
    return owner is None or owner == rank


def predict(
    views: Views,
    graph: Graph,
    findings: list[Finding],
    headline: int | None = None,
    now: Replay | None = None,
) -> dict[str, Any]:
    """Set ``what_if`` on each finding of the graph's rank (:func:`owns`), and return the
    summary: the step time now (from ``now``, the unchanged graph's replay, where the caller
    holds it), and with every modelled fix of the rank at once ("all of the above"). A
    finding's evidence is its own (``evidence_frame``)."""
    ctx = Context(graph=graph, views=views)
    base = step_time_ns(now if now is not None else replay(graph))
    changes: list[Change] = []
    for f in findings:
        if not owns(f, graph.rank, headline):
            continue
        model = MODELS.get(f.slug)
        if model is None:
            f.what_if = {
                "step_time_ns": None,
                "saving_ns": None,
                "assumes": NO_MODEL.get(f.slug, "no model of this rule's fix"),
            }
            continue
        try:
            ev = getattr(f, "evidence_frame", None)
            change = model(ctx, f, ev)
        except Exception as exc:  # noqa: BLE001 - a model's failure must not sink the report
            if os.environ.get("TRACEANALYZER_DEBUG"):
                raise
            f.what_if = {
                "step_time_ns": None,
                "saving_ns": None,
                "assumes": f"the model failed: {type(exc).__name__}",
            }
            continue
        if change is None:
            f.what_if = {
                "step_time_ns": None,
                "saving_ns": None,
                "assumes": "the trace lacks what the model needs",
            }
            continue
        changes.append(change)
        f.what_if = _outcome(graph, change, base, ASSUMES[f.slug])
    summary: dict[str, Any] = {"rank": graph.rank, "step_time_ns": _round(base), "all": None}
    if changes:
        combined = changes[0]
        for c in changes[1:]:
            combined = combined.merged(c)
        summary["all"] = _outcome(graph, combined, base, "every modelled fix above at once")
    return summary


def has_findings(findings: list[Finding], rank: int, headline: int | None) -> bool:
    """Whether rank ``rank`` owns a finding (:func:`owns`): only then is its what-if replayed."""
    return any(owns(f, rank, headline) for f in findings)


def _outcome(graph: Graph, change: Change, base: float | None, assumes: str) -> dict[str, Any]:
    new = step_time_ns(replay(graph, change))
    saving = None if new is None or base is None else base - new
    return {"step_time_ns": _round(new), "saving_ns": _round(saving), "assumes": assumes}


def _round(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def step_time_with(
    views: Views, graph: Graph, findings: list[Finding], slugs: list[str] | None = None
) -> float | None:
    """The mean step time with the fixes of the findings named in ``slugs`` (all modelled ones
    when None) applied at once; the step time now when none applies."""
    ctx = Context(graph=graph, views=views)
    combined: Change | None = None
    for f in findings:
        if (slugs is not None and f.slug not in slugs) or f.slug not in MODELS:
            continue
        if not owns(f, graph.rank, None):
            continue
        try:
            change = MODELS[f.slug](ctx, f, getattr(f, "evidence_frame", None))
        except Exception:  # noqa: BLE001 - as in predict
            if os.environ.get("TRACEANALYZER_DEBUG"):
                raise
            change = None
        if change is not None:
            combined = change if combined is None else combined.merged(change)
    return step_time_ns(replay(graph, combined))
