"""Detectors about how work is split into kernels: small grids, unfused elementwise chains,
unfused attention and per-parameter optimizers."""

from __future__ import annotations

import polars as pl

from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, ms, own_rank, pct, window_length
from traceanalyzer.rules.detectors.gemm import op_inputs

#: Softmax kernels of an unfused attention (fused attention kernels and backward passes are not).
SOFTMAX_KERNEL = r"(?i)softmax"
NOT_UNFUSED_SOFTMAX = (
    r"(?i)flash|fmha|sdpa|attention|attn|backward|bwd|logsoftmax|log_softmax"
    # softmax_warp_forward<in, out, acc, log2_elements, is_log_softmax, ...>: the loss's log-softmax
    # (Nsight Systems demangles the arguments as "(int)10, (bool)1")
    r"|softmax_warp_forward<[^,<>]+,[^,<>]+,[^,<>]+,\s*(\(int\))?\d+,\s*(true|\(bool\)1)"
)
#: Operators whose softmax is a loss, not attention.
LOSS_OP = r"(?i)log_softmax|cross_entropy|nll_loss"
#: Optimizer step ranges (PyTorch records ``Optimizer.step#AdamW.step``).
OPTIMIZER_RANGE = r"(?i)^optimizer\.step#|(^|[^a-z])(optimizer|opt)[_. ]?step([^a-z]|$)"
#: Kernels of multi-tensor (foreach) and fused optimizers: a few launches for all parameters.
#: Kernels only an Adam/AdamW step launches, one of each per parameter when not batched.
ADAM_KERNEL = r"(?i)lerp|addcdiv|addcmul"
BATCHED_OPTIMIZER_KERNEL = r"(?i)multi_tensor_apply|foreach|fused_adam|fusedadam|fused_sgd|_fused_|fused.*(adam|sgd|lamb)"
#: Kernels that are already the output of a fusing compiler (Triton, from torch.compile or by
#: hand): their names, or a launch through the driver API (cuLaunchKernel) instead of the runtime.
#: HBM passes per elementwise kernel when shapes were not recorded: unary ops make 2 (read,
#: write), binary ops 3.
DEFAULT_PASSES = 2.5
GENERATED_KERNEL = r"^triton_|^triton__|^fused_"
DRIVER_LAUNCH = r"^cu[A-Z]"
#: GEMM kernels the shared categories may not know yet (cuBLAS's nvjet kernels on Hopper).
EXTRA_GEMM = r"(?i)^nvjet|gemm|gemv"


def _kernels(views) -> pl.DataFrame:
    return own_rank(views, views.launches).filter(pl.col("kind") == "kernel").with_columns(
        dur=pl.col("end_ns") - pl.col("start_ns")
    )


@detector(
    "small_grid",
    params=("max_blocks_pct", "min_kernel_us", "min_gpu_time_pct", "min_saving_pct"),
    fields=("kernel_names", "small_ms", "small_pct", "sm_count", "top_kernel", "top_blocks",
            "saving_ms"),
)
def small_grid(views, p: Params) -> Detection | None:
    """Kernels launched with fewer blocks than ``max_blocks_pct`` of the device's SMs, per kernel
    name, when such a kernel takes at least ``min_gpu_time_pct`` of kernel time and the SMs they
    leave idle cost at least ``min_saving_pct`` of the window (communication kernels excluded:
    NCCL uses few blocks by design)."""
    kernels = _kernels(views).filter(pl.col("grid_x").is_not_null())
    if kernels.height == 0:
        return None
    devices = kernels["device"].unique().to_list()
    sms = {d: views.device_sm_count(d) for d in devices}
    if not any(sms.values()):
        raise NotApplicable("the GPU's SM count was not recorded")
    total = int(_kernels(views)["dur"].sum() or 0)
    sm_table = pl.DataFrame(
        {"device": list(sms), "sm_count": [sms[d] for d in sms]},
        schema={"device": pl.Int32, "sm_count": pl.Int64},
    )
    blocks = pl.col("grid_x").cast(pl.Int64) * pl.col("grid_y").fill_null(1) * pl.col("grid_z").fill_null(1)
    is_small = pl.col("blocks") * 100 < pl.col("sm_count") * p["max_blocks_pct"]
    small = (
        kernels.filter(pl.col("category") != "communication")
        .join(sm_table, on="device", how="inner")
        .with_columns(blocks=blocks)
        # a kernel of a few µs is bound by launch latency and its tail: more blocks would not help
        .filter(pl.col("dur") >= p["min_kernel_us"] * NS_PER_US)
        # judge a kernel by its typical launch: multi-tensor kernels launch a short last chunk
        .filter((pl.col("blocks").median() * 100 < pl.col("sm_count").first() * p["max_blocks_pct"])
                .over("name"))
        .filter(is_small)
    )
    if small.height == 0 or not total:
        return None
    by_name = small.group_by("name").agg(
        pl.col("dur").sum(), n=pl.len(), blocks=pl.col("blocks").median(),
        sm_count=pl.col("sm_count").first(), stream=pl.col("stream").first(),
        op=pl.col("op_name").drop_nulls().first(),
        # upper bound: the time the idle SMs could have taken off with a full grid
        saving=(pl.col("dur") * (1 - pl.col("blocks") / pl.col("sm_count"))).sum(),
    ).filter(pl.col("dur") * 100 >= p["min_gpu_time_pct"] * total).sort(
        ["dur", "name"], descending=[True, False]
    )
    saving = int(by_name["saving"].sum() or 0)
    window = window_length(views)
    if by_name.height == 0 or not window or pct(saving, window) < p["min_saving_pct"]:
        return None
    small_ns = int(by_name["dur"].sum())
    evidence = by_name.select(
        "name", pl.col("n").alias("instances"), "blocks", "sm_count",
        (pl.col("dur") / NS_PER_US).alias("total_us"),
        (100.0 * pl.col("dur") / total).alias("gpu_time_pct"), "op", "stream",
    )
    return Detection(
        impact_ns=saving,
        fields={
            "saving_ms": ms(saving),
            "kernel_names": by_name.height,
            "small_ms": ms(small_ns),
            "small_pct": pct(small_ns, total),
            "sm_count": int(by_name["sm_count"][0]),
            "top_kernel": by_name["name"][0],
            "top_blocks": float(by_name["blocks"][0]),
        },
        evidence=evidence,
    )


def optimizer_ranges(views) -> pl.DataFrame:
    """Host ranges of optimizer steps: rank, tid, name, start_ns, end_ns."""
    ann = views.annotations.filter(
        pl.col("kind").is_in(["user", "nvtx"]), pl.col("name").str.contains(OPTIMIZER_RANGE)
    ).select("rank", "tid", "name", "start_ns", "end_ns")
    cpu = views.cpu.filter(
        pl.col("kind").is_in(["op", "python", "other"]), pl.col("name").str.contains(OPTIMIZER_RANGE)
    ).select("rank", "tid", "name", "start_ns", "end_ns")
    return own_rank(views, pl.concat([ann, cpu])).unique(["rank", "tid", "start_ns"]).sort("start_ns")


def _in_ranges(kernels: pl.DataFrame, ranges: pl.DataFrame, tag: str) -> pl.DataFrame:
    """Add ``tag``: start of the range (same rank and host thread) whose span holds the launch."""
    marks = ranges.select(
        "rank", pl.col("tid").alias("launch_tid"), pl.col("start_ns").alias(tag),
        pl.col("end_ns").alias(f"{tag}_end"),
    ).sort(tag)
    if kernels.height == 0 or marks.height == 0:
        return kernels.with_columns(pl.lit(None, pl.Int64).alias(tag),
                                    pl.lit(None, pl.Int64).alias(f"{tag}_end"))
    # Kernels with no known launch get a time before every range, so they match none.
    return (
        kernels.with_row_index("_row")
        .with_columns(_at=pl.col("launch_start_ns").fill_null(-(2**62)))
        .sort("_at")
        .join_asof(marks, left_on="_at", right_on=tag, by=["rank", "launch_tid"],
                   strategy="backward", check_sortedness=False)
        .with_columns(pl.when(pl.col("_at") < pl.col(f"{tag}_end")).then(pl.col(tag)).alias(tag))
        .sort("_row")
        .drop("_row", "_at")
    )


@detector(
    "unfused_optimizer",
    params=("min_kernels_count",),
    fields=("steps_flagged", "kernels_per_step", "batched_kernels_per_step", "kernel_ms",
            "optimizer_ms", "top_range"),
)
def unfused_optimizer(views, p: Params) -> Detection | None:
    """Optimizer steps that launch at least ``min_kernels_count`` per-parameter kernels (not
    multi-tensor / fused ones); impact = the step's wall time beyond its kernels' run time."""
    ranges = optimizer_ranges(views)
    if ranges.height == 0:
        kernels, ranges = _adam_regions(views)
        if kernels is None:
            raise NotApplicable(
                "no optimizer step was recorded (an Optimizer.step#... range) and no per-parameter "
                "Adam kernels (lerp, addcmul, addcdiv) were found"
            )
    else:
        kernels = _in_ranges(_kernels(views), ranges, "_opt").filter(pl.col("_opt").is_not_null())
    if kernels.height == 0:
        return None
    per = kernels.group_by("_opt").agg(
        kernels=pl.len(),
        batched=pl.col("name").str.contains(BATCHED_OPTIMIZER_KERNEL).sum(),
        run_ns=pl.col("dur").sum(),
        gpu_first=pl.col("start_ns").min(),
        gpu_last=pl.col("end_ns").max(),
        range_end=pl.col("_opt_end").first(),
        step=pl.col("step").first(),
    ).with_columns(per_param=pl.col("kernels") - pl.col("batched"))
    flagged = per.filter(pl.col("per_param") >= p["min_kernels_count"])
    if flagged.height == 0:
        return None
    flagged = flagged.with_columns(
        wall_ns=pl.max_horizontal(pl.col("range_end") - pl.col("_opt"),
                                  pl.col("gpu_last") - pl.col("gpu_first")),
    ).with_columns(lost_ns=(pl.col("wall_ns") - pl.col("run_ns")).clip(lower_bound=0))
    names = ranges.filter(pl.col("start_ns").is_in(flagged["_opt"].implode()))
    evidence = flagged.sort("lost_ns", descending=True).select(
        pl.col("_opt").alias("start_ns"), pl.max_horizontal("range_end", "gpu_last").alias("end_ns"),
        "step", "kernels", pl.col("batched").alias("batched_kernels"),
        (pl.col("run_ns") / NS_PER_US).alias("kernel_run_us"),
        (pl.col("wall_ns") / NS_PER_US).alias("optimizer_us"),
    )
    return Detection(
        impact_ns=int(flagged["lost_ns"].sum()),
        fields={
            "steps_flagged": flagged.height,
            "kernels_per_step": float(flagged["kernels"].mean()),
            "batched_kernels_per_step": float(flagged["batched"].mean()),
            "kernel_ms": ms(flagged["run_ns"].sum()),
            "optimizer_ms": ms(flagged["wall_ns"].sum()),
            "top_range": names["name"][0] if names.height else None,
        },
        evidence=evidence,
    )


def _adam_regions(views) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """Without optimizer ranges (e.g. an Nsight Systems trace without NVTX for them): the GPU span,
    per step, from the first to the last per-parameter Adam kernel (lerp, addcmul, addcdiv), and
    every kernel inside it, tagged as ``_opt`` like :func:`_in_ranges` does."""
    kernels = _kernels(views)
    has_steps = views.steps.height > 0
    step = pl.col("step") if has_steps else pl.lit(0, pl.Int64).alias("step")
    kernels = kernels.with_columns(step)
    marks = kernels.filter(
        pl.col("name").str.contains(ADAM_KERNEL),
        ~pl.col("name").str.contains(BATCHED_OPTIMIZER_KERNEL),
        pl.col("step").is_not_null(),
    )
    if marks.height == 0:
        # a multi-tensor or fused optimizer is visible: that is the good case, not "unknown"
        batched = kernels.filter(pl.col("name").str.contains(BATCHED_OPTIMIZER_KERNEL))
        return (kernels.clear() if batched.height else None), pl.DataFrame()
    regions = marks.group_by("rank", "device", "step").agg(
        _opt=pl.col("start_ns").min(), _opt_end=pl.col("end_ns").max()
    )
    inside = kernels.join(regions, on=["rank", "device", "step"], how="inner").filter(
        pl.col("start_ns") >= pl.col("_opt"), pl.col("end_ns") <= pl.col("_opt_end")
    )
    names = regions.select(
        pl.col("_opt").alias("start_ns"),
        pl.lit("per-parameter Adam kernels (no optimizer range recorded)").alias("name"),
    )
    return inside, names


@detector(
    "elementwise_chain",
    params=("min_chain_count", "max_gap_us", "min_saving_pct"),
    fields=("chain_count", "kernel_count", "chain_ms", "saving_ms", "longest_chain",
            "hbm_unfused_gb", "hbm_fused_gb", "hbm"),
)
def elementwise_chain(views, p: Params) -> Detection | None:
    """Runs of at least ``min_chain_count`` back-to-back elementwise/norm kernels on one stream,
    in one step, over same-sized data, outside optimizer steps, not already generated by a fusing
    compiler. Each kernel moves its full-size inputs and its output through HBM ("passes"); fused,
    every link of the run saves writing one intermediate and reading it back (2 passes). The
    saving is the run's time x saved passes / passes."""
    kernels = _kernels(views)
    if kernels.height == 0:
        return None
    ranges = optimizer_ranges(views)
    if ranges.height:
        kernels = _in_ranges(kernels, ranges, "_opt")
    else:  # no optimizer ranges: the per-parameter Adam kernels mark the optimizer's part
        inside, _ = _adam_regions(views)
        if inside is not None and inside.height:
            tagged = inside.select("rank", "correlation", "_opt").unique(["rank", "correlation"])
            kernels = kernels.join(tagged, on=["rank", "correlation"], how="left")
        else:
            kernels = kernels.with_columns(pl.lit(None, pl.Int64).alias("_opt"))
    keys = ["rank", "device", "stream"]
    sizes = op_inputs(views).select(
        "rank", "external_id", pl.col("numel").alias("_numel"),
        # full-size inputs + the output; 2.5 when shapes were not recorded (unary and binary mix)
        (pl.col("full_inputs").cast(pl.Float64) + 1).alias("_passes"),
    )
    kernels = kernels.join(sizes, on=["rank", "external_id"], how="left")
    threads = (
        pl.col("grid_x").cast(pl.Int64).fill_null(1) * pl.col("grid_y").fill_null(1)
        * pl.col("grid_z").fill_null(1) * pl.col("block_x").fill_null(1)
        * pl.col("block_y").fill_null(1) * pl.col("block_z").fill_null(1)
    )
    prev = pl.col("_threads").shift(1).over(keys)
    prev_numel = pl.col("_numel").shift(1).over(keys)
    generated = pl.col("name").str.contains(GENERATED_KERNEL) | pl.col(
        "launch_name").fill_null("").str.contains(DRIVER_LAUNCH)
    k = (
        kernels.sort(*keys, "start_ns")
        .with_columns(
            _ew=pl.col("category").is_in(["elementwise", "norm"]) & pl.col("_opt").is_null()
            & ~generated,
            _threads=threads,
            _gap=pl.col("start_ns") - pl.col("end_ns").shift(1).over(keys),
        )
        .with_columns(
            _break=~pl.col("_ew")
            | ~pl.col("_ew").shift(1).over(keys).fill_null(False)
            # same-sized data: recorded input sizes within 2x, else launch sizes within 16x
            # (vectorized and unrolled kernels over the same tensor differ in grid by up to 8x)
            | (pl.col("_numel") > 2 * prev_numel).fill_null(False)
            | (prev_numel > 2 * pl.col("_numel")).fill_null(False)
            | (pl.col("_threads") > 16 * prev) | (prev > 16 * pl.col("_threads"))
            | (pl.col("step").ne_missing(pl.col("step").shift(1).over(keys)))
            | (pl.col("_gap") > p["max_gap_us"] * NS_PER_US)
        )
        .with_columns(_chain=pl.col("_break").fill_null(True).cast(pl.Int64).cum_sum().over(keys))
        .filter("_ew")
    )
    chains = (
        k.group_by(*keys, "_chain")
        .agg(
            n=pl.len(), run_ns=pl.col("dur").sum(), start_ns=pl.col("start_ns").min(),
            end_ns=pl.col("end_ns").max(), step=pl.col("step").first(),
            first_ext=pl.col("external_id").first(),
            passes=pl.col("_passes").fill_null(DEFAULT_PASSES).sum(),
            kernels=pl.col("name").str.slice(0, 60).str.join(" | "),
            ops=pl.col("op_name").drop_nulls().unique(maintain_order=True).str.join(", "),
        )
        .filter(pl.col("n") >= p["min_chain_count"])
        .with_columns(
            saved=pl.min_horizontal(2.0 * (pl.col("n") - 1), pl.col("passes") - 2).clip(lower_bound=0)
        )
        .with_columns(saving_ns=(pl.col("run_ns") * pl.col("saved") / pl.col("passes")).cast(pl.Int64))
    )
    window = window_length(views)
    saving = int(chains["saving_ns"].sum() or 0)
    if chains.height == 0 or not window or pct(saving, window) < p["min_saving_pct"]:
        return None
    chains = chains.join(
        op_inputs(views).select(
            "rank", pl.col("external_id").alias("first_ext"), "tensor_bytes"
        ),
        on=["rank", "first_ext"], how="left",
    )
    sized = chains.filter(pl.col("tensor_bytes").is_not_null())
    unfused_gb = float((sized["passes"] * sized["tensor_bytes"]).sum()) / 1e9 if sized.height else None
    fused_gb = (float(((sized["passes"] - sized["saved"]) * sized["tensor_bytes"]).sum()) / 1e9
                if sized.height else None)
    # Ties (a tiled or very regular trace has many equal chains) broken by time: group_by order
    # is arbitrary, and the report must not change from one run to the next.
    evidence = chains.sort(["saving_ns", "start_ns", "stream"],
                           descending=[True, False, False]).select(
        "start_ns", "end_ns", "stream", "step", pl.col("n").alias("kernels_in_chain"),
        (pl.col("run_ns") / NS_PER_US).alias("run_us"),
        (pl.col("saving_ns") / NS_PER_US).alias("saving_us"), "tensor_bytes", "ops",
        pl.col("kernels").alias("kernel_names"),
    )
    return Detection(
        impact_ns=saving,
        fields={
            "chain_count": chains.height,
            "kernel_count": int(chains["n"].sum()),
            "chain_ms": ms(chains["run_ns"].sum()),
            "saving_ms": ms(saving),
            "longest_chain": int(chains["n"].max()),
            "hbm_unfused_gb": unfused_gb,
            "hbm_fused_gb": fused_gb,
            "hbm": (f" HBM traffic {unfused_gb:.2f} GB now against {fused_gb:.2f} GB fused."
                    if unfused_gb is not None and fused_gb is not None else ""),
        },
        evidence=evidence,
    )


@detector(
    "unfused_attention",
    params=("max_distance_count", "min_impact_pct"),
    fields=("pattern_count", "score_ms", "attention_ms", "top_softmax", "seq_len"),
)
def unfused_attention(views, p: Params) -> Detection | None:
    """Attention as GEMM -> softmax -> GEMM on one stream (up to ``max_distance_count`` kernels
    apart): the T x T scores go through HBM. Impact = the time of the kernels between the two
    GEMMs (softmax, scale, mask, dropout), which a fused attention kernel does not spend."""
    kernels = _kernels(views)
    if kernels.height == 0:
        return None
    keys = ["rank", "device", "stream"]
    window_k = int(p["max_distance_count"])
    k = kernels.sort(*keys, "start_ns").with_columns(
        _idx=pl.int_range(pl.len()).over(keys),
        _gemm=(pl.col("category") == "gemm") | pl.col("name").str.contains(EXTRA_GEMM),
        _softmax=pl.col("name").str.contains(SOFTMAX_KERNEL)
        & ~pl.col("name").str.contains(NOT_UNFUSED_SOFTMAX),
    )
    # Index of the nearest GEMM before and after each kernel, on its stream.
    k = k.with_columns(
        _prev_gemm=pl.when("_gemm").then("_idx").shift(1).forward_fill().over(keys),
        _next_gemm=pl.when("_gemm").then("_idx").shift(-1).backward_fill().over(keys),
    )
    ndim = op_inputs(views).select("rank", "external_id", _ndim=pl.col("ndim"))
    soft = k.filter(
        "_softmax",
        pl.col("_idx") - pl.col("_prev_gemm") <= window_k,
        pl.col("_next_gemm") - pl.col("_idx") <= window_k,
        ~pl.col("op_name").fill_null("").str.contains(LOSS_OP),
    ).join(ndim, on=["rank", "external_id"], how="left").filter(
        # attention scores are [batch, (heads,) T, T]; a 2-D softmax is a classifier's
        pl.col("_ndim").is_null() | (pl.col("_ndim") >= 3)
    ).drop("_ndim")
    if soft.height == 0:
        return None
    # The kernels strictly between the two GEMMs work on the materialized scores.
    spans = soft.select(*keys, pl.col("_prev_gemm").alias("_lo"), pl.col("_next_gemm").alias("_hi"),
                        pl.col("name").alias("softmax"), pl.col("external_id").alias("_ext"),
                        pl.col("op_name").alias("op"), "step")
    members = k.join(spans, on=keys, how="inner").filter(
        pl.col("_idx") >= pl.col("_lo"), pl.col("_idx") <= pl.col("_hi")
    )
    per = members.group_by(*keys, "_lo", "_hi").agg(
        start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max(),
        score_ns=pl.col("dur").filter(~pl.col("_gemm")).sum(),
        total_ns=pl.col("dur").sum(), softmax=pl.col("softmax").first(),
        op=pl.col("op").first(), step=pl.col("step").first(), _ext=pl.col("_ext").first(),
    )
    window = window_length(views)
    score = int(per["score_ns"].sum() or 0)
    if not window or pct(score, window) < p["min_impact_pct"]:
        return None
    shapes = op_inputs(views).select(
        "rank", pl.col("external_id").alias("_ext"),
        pl.col("last_dim").alias("seq_len"),
    )
    per = per.join(shapes, on=["rank", "_ext"], how="left").sort("score_ns", descending=True)
    evidence = per.select(
        "start_ns", "end_ns", "stream", "step", "softmax", "op", "seq_len",
        (pl.col("score_ns") / NS_PER_US).alias("score_us"),
        (pl.col("total_ns") / NS_PER_US).alias("attention_us"),
    )
    seq = per["seq_len"].drop_nulls()
    return Detection(
        impact_ns=score,
        fields={
            "pattern_count": per.height,
            "score_ms": ms(score),
            "attention_ms": ms(per["total_ns"].sum()),
            "top_softmax": per["softmax"][0],
            "seq_len": int(seq.max()) if seq.len() else None,
        },
        evidence=evidence,
    )
