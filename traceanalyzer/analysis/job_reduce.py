"""A job analyzed rank by rank: each trace reduced to small frames, the client combining them.

:func:`reduce_trace` runs where a rank's trace is loaded (a local pool worker or a Dask worker)
and keeps only what the cross-rank analysis of :mod:`analysis.job` reads:

- the rank's metrics (one row of :func:`analysis.rank_table`);
- its communication kernels, flagged as :func:`analysis.comm.flagged_comm_kernels` flags them
  (rank, device, stream, name, step, start_ns, end_ns, in_trace);
- the part of the union of its compute kernels that lies inside its communication kernels (all
  that the exposed-transfer figure ever measures, :func:`analysis.comm.collectives_from`);
- per marked step, the extent of the GPU work launched in it (HTA's mean iteration time) and
  the step's duration;
- its anchors for the job's critical path (:func:`analysis.critical_ranks.rank_anchors`: one
  row per communication kernel and per step, with the rank's own work before it);
- its findings, when rules run.

:func:`combine_summaries` on the client renumbers the ranks (:func:`analysis.job.assign_ranks`'s
rule), shifts each trace by its epoch offset, and runs the same matching, lateness, straggler
and exposed-transfer code as :func:`analysis.job.analyze_job` on a combined trace, so the two
give the same per-rank table (the tests check it). The client holds ranks x collectives rows,
never a trace's events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.analysis import path_ranks
from traceanalyzer.analysis.comm import collectives_from, exposed_by_rank, flagged_comm_kernels
from traceanalyzer.analysis.critical_ranks import ANCHOR_SCHEMA, views_anchors
from traceanalyzer.analysis.intervals import merge
from traceanalyzer.model import Trace

COMM_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "device": pl.Int32,
        "stream": pl.Int64,
        "name": pl.String,
        "step": pl.Int64,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "in_trace": pl.Boolean,
    }
)
COVER_SCHEMA = pl.Schema(
    {"rank": pl.Int32, "device": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64}
)
EXTENT_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "step": pl.Int64,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "duration_ns": pl.Int64,
    }
)
FINDING_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "slug": pl.String,
        "rule_id": pl.String,
        "severity": pl.String,
        "title": pl.String,
        "impact_ns": pl.Int64,
        "impact_pct": pl.Float64,
        # The finding's what-if on its rank's graph (analysis.whatif; null without a model).
        "what_if_step_time_ns": pl.Int64,
        "what_if_saving_ns": pl.Int64,
    }
)
PATH_STEPS = path_ranks.STEP_SCHEMA
PATH_GPUS = path_ranks.GPU_SCHEMA
#: tensorboard_trace_handler's file names: ``{hostname}_{pid}.{time}.pt.trace.json``.
_TB_NAME = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]{0,252})_\d+\.\d+\.pt\.trace\.json")


@dataclass
class RankSummary:
    """One trace (one rank, or the several ranks of an nsys export), reduced."""

    path: str
    #: The trace's own rank numbers and the one its metadata records.
    own_ranks: list[int]
    recorded_rank: int
    world_size: int
    time_base_ns: int | None
    host: str | None
    source_format: str
    metrics: pl.DataFrame
    comm: pl.DataFrame
    cover: pl.DataFrame
    #: Own ranks whose trace marks steps.
    stepped: list[int]
    #: Per (rank, marked step): extent of the GPU work launched in it; duration_ns: the step's
    #: wall duration (null where the step holds no GPU work).
    extents: pl.DataFrame
    findings: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    #: Per (rank, step) the rank's critical path by kind, and per (rank, step, GPU) its time on
    #: that GPU (analysis.path_ranks): a few rows per step.
    paths: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PATH_STEPS))
    path_gpus: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PATH_GPUS))
    #: The rank's anchors for the cross-rank critical path (analysis.critical_ranks).
    anchors: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ANCHOR_SCHEMA))

    def nbytes(self) -> int:
        frames = (self.metrics, self.comm, self.cover, self.extents, self.findings, self.paths,
                  self.path_gpus, self.anchors)
        return int(sum(f.estimated_size() for f in frames))


def trace_host(trace: Trace) -> str | None:
    """The host the trace was recorded on: nsys's target Hostname, a Kineto ``hostname``
    (top level or in distributedInfo), else tensorboard_trace_handler's file name; None when
    the trace does not say."""
    extra = trace.meta.extra
    for value in (
        extra.get("hostname"),
        (extra.get("distributed") or {}).get("hostname")
        if isinstance(extra.get("distributed"), dict)
        else None,
    ):
        if isinstance(value, str) and value.strip():
            return "".join(ch for ch in value.strip() if ch.isprintable())[:255]
    m = _TB_NAME.match(Path(trace.meta.path).name)
    return m.group("host") if m else None


def reduce_trace(trace: Trace, *, rules: bool = False, rule_config: Any = None) -> RankSummary:
    """``trace`` (already narrowed to its window) reduced to what the job's client needs."""
    from traceanalyzer.analysis import rank_table
    from traceanalyzer.analysis.views import Views

    views = Views(trace)
    window = trace.meta.extra.get("window")
    kind = window.get("kind", "all") if isinstance(window, dict) else "all"
    for m in views.metrics_by_rank.values():
        m.window_kind = kind
    metrics = rank_table(views.metrics_by_rank).cast({"rank": pl.Int32})
    launches = views.marked_launches
    kernels = launches.filter(pl.col("kind") == "kernel")
    comm = flagged_comm_kernels(kernels).select(list(COMM_SCHEMA)).cast(COMM_SCHEMA)
    compute = kernels.filter(pl.col("category") != "communication")
    cover = intersect(
        merge(compute, ["rank", "device"]), merge(comm, ["rank", "device"]), ["rank", "device"]
    ).cast(COVER_SCHEMA)
    marked = views.marked_steps
    stepped = sorted(int(r) for r in marked["rank"].unique().to_list()) if marked.height else []
    in_steps = launches.filter(pl.col("step").is_not_null())
    extents = in_steps.group_by("rank", "step").agg(
        start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max()
    )
    if marked.height:
        walls = views.wall_steps.select(
            "rank", "step", duration_ns=pl.col("end_ns") - pl.col("start_ns")
        )
        extents = walls.cast({"rank": pl.Int32, "step": pl.Int64}).join(
            extents.cast({"rank": pl.Int32, "step": pl.Int64}),
            on=["rank", "step"],
            how="full",
            coalesce=True,
        )
    else:
        extents = extents.with_columns(duration_ns=pl.lit(None, pl.Int64))
    extents = extents.select(list(EXTENT_SCHEMA)).cast(EXTENT_SCHEMA).sort("rank", "step")
    found: list[Any] = []
    if rules:
        from traceanalyzer.rules.engine import evaluate

        found, _ = evaluate(views, rule_config)
    # Each finding's what-if on its rank's graph, while every_rank has the graph at hand.
    from traceanalyzer.analysis import whatif
    from traceanalyzer.analysis.critical_path import analyze as critical_path_of

    owner = trace.meta.rank  # of a finding that names no rank, as in the frame below

    def predict(rank: int, path: Any) -> None:
        if whatif.has_findings(found, rank, owner):
            whatif.predict(views, path.graph, found, owner, path.replay)

    headline = views.metrics.rank
    own_path = critical_path_of(views, headline)  # one graph for the path and the anchors
    paths, path_gpus = path_ranks.every_rank(views, headline, own_path, on_path=predict)
    findings = pl.DataFrame(
        [
            {
                "rank": f.rank if f.rank is not None else trace.meta.rank,
                "slug": f.slug,
                "rule_id": f.rule_id,
                "severity": f.severity,
                "title": f.title,
                "impact_ns": int(f.impact_ns),
                "impact_pct": float(f.impact_pct),
                "what_if_step_time_ns": (f.what_if or {}).get("step_time_ns"),
                "what_if_saving_ns": (f.what_if or {}).get("saving_ns"),
            }
            for f in found
        ],
        schema=FINDING_SCHEMA,
    )
    return RankSummary(
        paths=paths,
        path_gpus=path_gpus,
        path=trace.meta.path,
        own_ranks=list(views.ranks),
        recorded_rank=trace.meta.rank,
        world_size=trace.meta.world_size,
        time_base_ns=trace.meta.time_base_ns,
        host=trace_host(trace),
        source_format=trace.meta.source_format,
        metrics=metrics,
        comm=comm,
        cover=cover,
        stepped=stepped,
        extents=extents,
        findings=findings,
        warnings=list(trace.meta.warnings),
        anchors=views_anchors(views, {headline: own_path}),
    )


def intersect(a: pl.DataFrame, b: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The intersection of two interval sets (each a union: disjoint per ``by`` group), as
    disjoint intervals: a sweep over both sets' end points."""

    def events(frame: pl.DataFrame, which: str) -> pl.DataFrame:
        one, zero = pl.lit(1, pl.Int32), pl.lit(0, pl.Int32)
        a_, b_ = (one, zero) if which == "da" else (zero, one)
        return pl.concat(
            [
                frame.select(*by, t=pl.col("start_ns"), da=a_, db=b_),
                frame.select(*by, t=pl.col("end_ns"), da=-a_, db=-b_),
            ]
        )

    if a.is_empty() or b.is_empty():
        return a.select(*by, "start_ns", "end_ns").clear()
    sweep = (
        pl.concat([events(a, "da"), events(b, "db")])
        .group_by(*by, "t")
        .agg(pl.col("da").sum(), pl.col("db").sum())
        .sort(*by, "t")
        .with_columns(
            ca=pl.col("da").cum_sum().over(by),
            cb=pl.col("db").cum_sum().over(by),
            next_t=pl.col("t").shift(-1).over(by),
        )
    )
    pieces = sweep.filter(
        pl.col("ca") > 0,
        pl.col("cb") > 0,
        pl.col("next_t").is_not_null(),
        pl.col("next_t") > pl.col("t"),
    )
    return merge(pieces.select(*by, start_ns=pl.col("t"), end_ns=pl.col("next_t")), by)


# -- the client ---------------------------------------------------------------------------------


@dataclass
class Combined:
    """Every rank's reduced frames in the job's rank numbers and one clock."""

    ranks: list[int]
    metrics: pl.DataFrame
    comm: pl.DataFrame
    cover: pl.DataFrame
    stepped: list[int]
    extents: pl.DataFrame
    findings: pl.DataFrame
    paths: pl.DataFrame
    path_gpus: pl.DataFrame
    anchors: pl.DataFrame
    #: Per job rank: source path and host.
    sources: dict[int, str]
    hosts: dict[int, str | None]
    world_sizes: list[int]
    shifted: bool


def combine_summaries(summaries: list[RankSummary]) -> Combined:
    """Renumber and shift each summary's frames as :func:`analysis.job.combine` does a trace's."""
    from traceanalyzer.analysis.job import assign_rank_maps

    maps = assign_rank_maps(
        [s.own_ranks for s in summaries],
        [s.recorded_rank for s in summaries],
        [s.path for s in summaries],
    )
    bases = [s.time_base_ns for s in summaries]
    shift_all = all(b is not None for b in bases) and len(summaries) > 1
    origin = min(b for b in bases if b is not None) if shift_all else 0
    parts: dict[str, list[pl.DataFrame]] = {
        k: []
        for k in ("metrics", "comm", "cover", "extents", "findings", "paths", "path_gpus", "anchors")
    }
    stepped: list[int] = []
    sources: dict[int, str] = {}
    hosts: dict[int, str | None] = {}
    for s, rank_map in zip(summaries, maps, strict=True):
        shift = (s.time_base_ns - origin) if shift_all and s.time_base_ns is not None else 0
        if len(summaries) == 1:
            rank_map = {r: r for r in rank_map}  # one trace keeps its ranks, as combine() does
        for name in parts:
            frame = getattr(s, name)
            times = (
                ["window_start_ns", "window_end_ns"]
                if name == "metrics"
                else []
                if name in ("findings", "path_gpus")
                else ["start_ns", "end_ns", "from_ns"]
            )
            parts[name].append(_renumber(frame, rank_map, shift, times))
        stepped += [rank_map[r] for r in s.stepped if r in rank_map]
        for r in rank_map.values():
            sources[r] = s.path
            hosts[r] = s.host
    frames = {name: pl.concat(p, how="vertical_relaxed") for name, p in parts.items()}
    ranks = sorted(sources)
    return Combined(
        ranks=ranks,
        stepped=sorted(stepped),
        sources=sources,
        hosts=hosts,
        world_sizes=sorted({s.world_size for s in summaries}),
        shifted=shift_all,
        **frames,
    )


def _renumber(
    frame: pl.DataFrame, rank_map: dict[int, int], shift: int, times: list[str]
) -> pl.DataFrame:
    exprs = [
        pl.col("rank").replace_strict(
            list(rank_map),
            list(rank_map.values()),
            default=min(rank_map.values()),
            return_dtype=pl.Int32,
        )
    ]
    if shift:
        exprs += [pl.col(c) + shift for c in times if c in frame.columns]
    return frame.with_columns(exprs)


def exposed_from(c: Combined, collectives: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per rank, exposed transfer and wait over every rank's collectives (Views.exposed_comm);
    ``collectives``: :func:`analysis.comm.collectives_from` of ``c``, where already computed."""
    if collectives is None:
        collectives = collectives_from(c.comm, c.cover, c.stepped)
    steps = pl.DataFrame({"rank": c.stepped}, schema={"rank": pl.Int32})
    return exposed_by_rank(collectives, steps, c.ranks)


def patched_metrics(c: Combined, exposed: pl.DataFrame) -> pl.DataFrame:
    """The ranks' metrics with the exposed transfer measured against every rank (as
    Views.metrics_by_rank patches them on a combined trace)."""
    e = exposed.select("rank", _t="exposed_comm_ns", _w="comm_wait_ns", _b="exposed_comm_basis")
    has_comm = pl.col("communication_ns") > 0
    return (
        c.metrics.join(e, on="rank", how="left")
        .with_columns(
            exposed_transfer_ns=pl.when(has_comm)
            .then(pl.col("_t"))
            .otherwise("exposed_transfer_ns"),
            comm_wait_ns=pl.when(has_comm).then(pl.col("_w")).otherwise("comm_wait_ns"),
            exposed_transfer_basis=pl.when(has_comm)
            .then(pl.col("_b"))
            .otherwise("exposed_transfer_basis"),
        )
        .drop("_t", "_w", "_b")
        .sort("rank")
    )


def analyze_summaries(
    summaries: list[RankSummary],
    *,
    failed: list[dict[str, str]] | None = None,
    min_lateness_us: float | None = None,
) -> Any:
    """The job (:class:`analysis.job.JobResult`, with its :attr:`scale` view) from every loaded
    trace's summary; ``failed``: the traces that could not be loaded (path, error)."""
    from traceanalyzer.analysis.job import (
        MIN_LATENESS_US,
        hta_late_from,
        job_from_parts,
        windows_overlap,
    )
    from traceanalyzer.analysis.job_scale import scale_view

    lateness_us = MIN_LATENESS_US if min_lateness_us is None else min_lateness_us
    from traceanalyzer.analysis.critical_ranks import analyze_linked

    c = combine_summaries(summaries)
    collectives = collectives_from(c.comm, c.cover, c.stepped)
    exposed = exposed_from(c, collectives)
    hta = hta_late_from(
        c.extents.filter(pl.col("start_ns").is_not_null()),
        c.comm.filter(pl.col("step").is_not_null()),
        c.ranks,
    )
    job = job_from_parts(
        ranks=c.ranks,
        metrics=patched_metrics(c, exposed),
        comm=c.comm,
        exposed=exposed,
        hta=hta,
        sources=c.sources,
        world_sizes=c.world_sizes,
        min_lateness_us=lateness_us,
    )
    counts = c.findings.group_by("rank").agg(findings=pl.len().cast(pl.Int64))
    job.ranks = (
        job.ranks.with_columns(
            host=pl.col("rank").replace_strict(
                list(c.hosts), list(c.hosts.values()), default=None, return_dtype=pl.String
            )
        )
        .join(counts, on="rank", how="left")
        .with_columns(pl.col("findings").fill_null(0))
    )
    job.paths = c.paths.sort("rank", "step")
    job.path_gpus = c.path_gpus.sort("rank", "step", "device")
    job.failed = list(failed or [])
    if job.failed:
        job.warnings.append(
            f"{len(job.failed)} of {len(job.failed) + len(summaries)} traces could "
            "not be loaded; the job is analyzed without them"
        )
    job.scale = scale_view(
        job, c.extents.select("rank", "step", "duration_ns"), c.findings, lateness_us
    )
    if job.per_rank is not None and windows_overlap(job.ranks):
        job.critical = analyze_linked(c.anchors, collectives, job.per_rank)
    return job


def summary_size(summaries: list[RankSummary]) -> int:
    """Bytes the summaries hold (for the bench)."""
    return sum(s.nbytes() for s in summaries)


def default_workers(n: int) -> int:
    from traceanalyzer.cpus import usable_cpus

    return max(1, min(n, usable_cpus()))
