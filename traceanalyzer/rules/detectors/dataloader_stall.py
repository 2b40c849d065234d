"""dataloader-stall: the GPU idle while the host loads data."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.rules.detectors import Detection, NotApplicable, Params, detector
from traceanalyzer.rules.detectors._common import NS_PER_US, ms, own_rank, pct, window_length
from traceanalyzer.texts import matches_each

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views


#: Host-side ranges that are data loading: PyTorch's DataLoader iterator, or a user/NVTX range
#: with a data/batch/load word in its name ("load_batch", "data", "get_batch", "wait_for_batch").
DATALOADER_OP = r"(?i)dataloader"
DATALOADER_RANGE = r"(?i)(^|[^a-z])(data|batch|batches|load|loader|loading|dataloader|prefetch)([^a-z]|$)|dataloader"
#: ...but not ranges that only contain such a word: communication of input data (torchrec's
#: ``## sparse_data_dist ##`` and ``## all2all_data:lengths ##`` are all-to-alls of the batch's
#: sparse features between ranks, not loading), data or model parallelism, metadata, and loading
#: a model or checkpoint.
NOT_LOADING_RANGE = (
    r"(?i)all_?2_?all|all_?to_?all|all_?reduce|all_?gather|reduce_?scatter|broadcast|"
    r"(^|[^a-z])(dist|comm|nccl|rccl|gloo|collective|send|recv|isend|irecv)([^a-z]|$)|"
    r"parallel|metadata|checkpoint|ckpt|state_dict|weights|model|save"
)
#: Python frames (``with_stack=True``) that build batches: a data set's ``__getitem__``, a collate
#: function, or the DataLoader iterator, for loops that load data without a DataLoader.
DATALOADER_FRAME = r"\): (__getitem__|__getitems__|_?collate\w*|fetch)$|dataloader\.py\(\d+\): __next__$"
#: ...but not indexing of framework containers (nn.Sequential[i], ModuleList, ParameterDict).
NOT_DATALOADER_FRAME = r"^<|torch/nn/|torch/_|torch/fx/|torch/distributed/"


def loader_ranges(views: Views) -> pl.DataFrame:
    """Host ranges spent loading data: rank, name, start_ns, end_ns."""
    ann = views.annotations.filter(
        pl.col("kind").is_in(["user", "nvtx"]), pl.col("name").str.contains(DATALOADER_RANGE),
        ~pl.col("name").str.contains(NOT_LOADING_RANGE) | pl.col("name").str.contains(DATALOADER_OP),
        pl.col("end_ns") > pl.col("start_ns"),
    ).select("rank", "name", "start_ns", "end_ns")
    # The patterns are tested once per distinct name: the CPU frame has millions of rows.
    op_like, frame_like, not_frame = matches_each(
        views.cpu["name"], (DATALOADER_OP, DATALOADER_FRAME, NOT_DATALOADER_FRAME))
    is_op = pl.col("kind").is_in(["op", "other"]) & op_like
    is_frame = (pl.col("kind") == "python") & frame_like & ~not_frame
    cpu = views.cpu.lazy().filter(is_op | is_frame, pl.col("end_ns") > pl.col("start_ns")).select(
        "rank", "name", "start_ns", "end_ns"
    ).collect()
    return own_rank(views, pl.concat([ann, cpu]))


@detector(
    params=("min_stall_pct",),
    fields=("stall_ms", "stall_pct", "range_count", "top_range", "loading_ms"),
)
def dataloader_stall(views: Views, p: Params) -> Detection | None:
    """GPU idle while the host is inside a data-loading range, when at least ``min_stall_pct``
    of the window."""
    ranges = loader_ranges(views)
    if ranges.height == 0:
        raise NotApplicable(
            "no data loading was recorded (a DataLoader, a user/NVTX range named like data, "
            "batch or load, or a Dataset __getitem__ in a with_stack=True trace)"
        )
    window = window_length(views)
    gaps = own_rank(views, views.gpu_idle_gaps)
    if not window or gaps.height == 0:
        return None
    merged = ranges.select("rank", "start_ns", "end_ns")
    merged = intervals.merge(merged, by=["rank"])
    stall = int(intervals.overlap_ns(merged, gaps.select("rank", "start_ns", "end_ns"))["overlap_ns"].sum())
    if pct(stall, window) < p["min_stall_pct"]:
        return None
    per_range = intervals.overlap_ns(ranges, gaps.select("rank", "start_ns", "end_ns"), name="gpu_idle_ns")
    per_range = per_range.filter(pl.col("gpu_idle_ns") > 0).sort("gpu_idle_ns", descending=True)
    top = per_range.group_by("name").agg(pl.col("gpu_idle_ns").sum()).sort(
        ["gpu_idle_ns", "name"], descending=[True, False]
    )
    evidence = per_range.select(
        "start_ns", "end_ns", "name",
        ((pl.col("end_ns") - pl.col("start_ns")) / NS_PER_US).alias("duration_us"),
        (pl.col("gpu_idle_ns") / NS_PER_US).alias("gpu_idle_us"),
    )
    return Detection(
        impact_ns=stall,
        fields={
            "stall_ms": ms(stall),
            "stall_pct": pct(stall, window),
            "range_count": per_range.height,
            "top_range": top["name"][0] if top.height else None,
            "loading_ms": ms(intervals.total(merged)),
        },
        evidence=evidence,
    )
