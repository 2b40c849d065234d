"""unfused-attention: attention as GEMM -> softmax -> GEMM, its T x T scores through HBM."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.rules.detectors import Detection, Params, detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_US,
    kernels_of,
    ms,
    pct,
    window_length,
    with_inputs,
)
from traceanalyzer.texts import matches_each

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


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

#: GEMM kernels the shared categories may not know yet (cuBLAS's nvjet kernels on Hopper).
EXTRA_GEMM = r"(?i)^nvjet|gemm|gemv"


@detector(
    params=("max_distance_count", "min_impact_pct"),
    fields=("pattern_count", "score_ms", "attention_ms", "top_softmax", "seq_len"),
)
def unfused_attention(views: Views, p: Params) -> Detection | None:
    """Attention as GEMM -> softmax -> GEMM on one stream (up to ``max_distance_count`` kernels
    apart): the T x T scores go through HBM. Impact = the time of the kernels between the two
    GEMMs (softmax, scale, mask, dropout), which a fused attention kernel does not spend."""
    kernels = kernels_of(views)
    if kernels.height == 0:
        return None
    keys = ["rank", "device", "stream"]
    window_k = int(p["max_distance_count"])
    # The patterns are tested once per distinct kernel name.
    is_softmax, fused, extra_gemm = matches_each(
        kernels["name"], (SOFTMAX_KERNEL, NOT_UNFUSED_SOFTMAX, EXTRA_GEMM))
    softmax = is_softmax & ~fused
    # The flags and times only are sorted; names are gathered for the softmax kernels alone
    # (a sort copies every column it carries, and kernel names are most of the frame).
    k = kernels.select(
        *keys, "start_ns", "end_ns", "dur", "step", "external_id",
        _row=pl.int_range(pl.len(), dtype=pl.UInt32),
        _gemm=(pl.col("category") == "gemm") | extra_gemm,
        _softmax=softmax,
    )
    if not k["_softmax"].any():
        return None
    k = k.sort(*keys, "start_ns").with_columns(_idx=pl.int_range(pl.len()).over(keys))
    # Index of the nearest GEMM before and after each kernel, on its stream.
    k = k.with_columns(
        _prev_gemm=pl.when("_gemm").then("_idx").shift(1).forward_fill().over(keys),
        _next_gemm=pl.when("_gemm").then("_idx").shift(-1).backward_fill().over(keys),
    )
    soft = k.filter(
        "_softmax",
        pl.col("_idx") - pl.col("_prev_gemm") <= window_k,
        pl.col("_next_gemm") - pl.col("_idx") <= window_k,
    )
    soft = soft.with_columns(name=kernels["name"].gather(soft["_row"]),
                             op_name=kernels["op_name"].gather(soft["_row"])).filter(
        ~pl.col("op_name").fill_null("").str.contains(LOSS_OP),
    ).pipe(lambda f: with_inputs(views, f, {"_ndim": "ndim"})).filter(
        # attention scores are [batch, (heads,) T, T]; a 2-D softmax is a classifier's
        pl.col("_ndim").is_null() | (pl.col("_ndim") >= 3)
    ).drop("_ndim")
    if soft.height == 0:
        return None
    # The kernels from one GEMM to the other work on the materialized scores. Two softmaxes
    # between the same GEMMs are one block. Each block holds at most 2 * max_distance_count + 1
    # kernels: listing their indices and joining on (stream, index) is linear in the trace.
    spans = soft.sort(*keys, "_idx").unique([*keys, "_prev_gemm", "_next_gemm"], keep="first",
                                            maintain_order=True).select(
        *keys, pl.col("_prev_gemm").alias("_lo"), pl.col("_next_gemm").alias("_hi"),
        pl.col("name").alias("softmax"), pl.col("external_id").alias("_ext"),
        pl.col("op_name").alias("op"),
    )
    members = spans.with_columns(_idx=pl.int_ranges("_lo", pl.col("_hi") + 1)).explode("_idx").join(
        k.select(*keys, "_idx", "start_ns", "end_ns", "dur", "_gemm", "step"),
        on=[*keys, "_idx"], how="inner",
    )
    per = members.group_by(*keys, "_lo", "_hi").agg(
        start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max(),
        score_ns=pl.col("dur").filter(~pl.col("_gemm")).sum(),
        total_ns=pl.col("dur").sum(), softmax=pl.col("softmax").first(),
        op=pl.col("op").first(), step=pl.col("step").sort_by("_idx").first(),
        _ext=pl.col("_ext").first(),
    )
    window = window_length(views)
    score = int(per["score_ns"].sum() or 0)
    if not window or pct(score, window) < p["min_impact_pct"]:
        return None
    # Ties (a tiled or very regular trace repeats its blocks) broken by time and stream: the
    # report must not change from one run to the next.
    per = with_inputs(views, per, {"seq_len": "last_dim"}, on="_ext").sort(
        ["score_ns", "start_ns", "stream"], descending=[True, False, False])
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
            "attention_ms": ms(per["total_ns"].sum()),  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
            "top_softmax": per["softmax"][0],
            "seq_len": int(seq.max()) if seq.len() else None,  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
        },
        evidence=evidence,
    )
