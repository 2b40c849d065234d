"""Multi-rank jobs: several ranks analyzed as one job, with stragglers and collective skew.

A job is a set of per-rank traces (Kineto or Nsight Systems; an nsys export of several processes
already holds several ranks). :func:`combine` merges them into one canonical trace whose ``rank``
column tells ranks apart; :func:`analyze_job` reports, per rank, the usual metrics side by side
plus how late each rank starts its collectives.

Collectives are matched across ranks by (step, kernel name, ordinal within that step): the i-th
``ncclDevKernel_AllReduce...`` of step 12 on rank 0 is the same collective as the i-th on rank 1.
Outside profiler steps the step is null and the ordinal runs over the whole trace. A collective
that was running when a rank's profiler started (no launch recorded) and ended before any other
rank recorded a collective is left out: no other rank holds it, and it would shift that rank's
ordinals. A collective found on every rank is an *instance*; its **skew** is the spread of its
start times, and a rank's **lateness** in it is its start minus the earliest start. NCCL kernels
of one collective end together (each waits for all ranks), so the rank that starts last is the
one the others waited for.

Exposed communication per rank is the nccl-not-overlapped rule's (:mod:`analysis.comm`): when a
rank's trace marks steps, only collectives launched inside steps count (a set-up barrier before
the first step is left out), so the job view and the rule agree; ``exposed_comm_window`` says
which window applied. The metrics' ``exposed_communication_ns`` is the whole-trace figure.

Stragglers follow HTA's "late start" analysis (``hta/analyzers/straggler.py``,
``find_stragglers_with_late_start_comm_kernels``): per iteration, take the last long
communication kernel (at least 1% of the mean iteration time) for each (rank, stream, name);
keep the (stream, name) whose normalized duration varies most across ranks; the rank whose
kernel starts latest in an iteration is that iteration's straggler candidate. HTA counts the top
``n_stragglers`` (default 2) per iteration; with few ranks that flags everyone, so this module
counts the top 1 (``hta_late_iterations``). A rank is reported as *the* straggler when it starts
last in at least half the matched collectives and its mean lateness is at least
``min_lateness_us`` and twice the largest mean lateness of the other ranks.

Clocks: start times of different ranks are compared directly (as HTA does), after shifting each
trace by its recorded epoch offset where every trace records one. Traces from hosts whose clocks
disagree by more than the lateness you look for give meaningless lateness; the skew of a
collective measured within one nsys report (one clock) is exact.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.analysis.comm import flagged_comm_kernels, numbered
from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.model import FRAME_SCHEMAS, Trace, TraceMeta

#: HTA's filter for "significant" communication kernels: >= 1% of the mean iteration time.
HTA_MIN_NORMALIZED_DURATION = 0.01
#: A straggler must lag by at least this much on average (below it, lateness is launch jitter).
MIN_LATENESS_US = 10.0
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


@dataclass
class JobResult:
    """One job: the combined analysis plus cross-rank tables."""

    #: The combined trace's analysis (None when the ranks were reduced one by one).
    result: AnalysisResult | None
    #: Per rank: the metrics of ``Metrics`` plus collectives, lateness_mean_ns, lateness_p50_ns,
    #: lateness_max_ns, late_count, late_share, hta_late_iterations, straggler, source, and the
    #: rule's exposed communication (:mod:`traceanalyzer.analysis.comm`): exposed_comm_ns,
    #: exposed_comm_pct (of span_ns), exposed_comm_collectives, exposed_comm_window; and rule
    #: collective-wait's comm_wait_ns and comm_wait_pct (waiting for the other ranks), and
    #: host_wait_pct (the GPU's idle waiting for its own host, of span_ns).
    ranks: pl.DataFrame
    #: Per matched collective: step, name, ordinal, first_start_ns, last_start_ns, skew_ns,
    #: latest_rank, mean_duration_ns.
    collectives: pl.DataFrame
    stragglers: list[int] = field(default_factory=list)
    #: Collectives seen on some ranks but not all (profiling windows that do not line up).
    unmatched_collectives: int = 0
    warnings: list[str] = field(default_factory=list)
    #: Per rank and matched collective: step, name, ordinal, rank, start_ns, lateness_ns.
    per_rank: pl.DataFrame | None = None
    #: The cross-rank view at scale (analysis.job_scale.JobScale); set by analyze_summaries.
    scale: Any = None
    #: Traces that could not be loaded: path and one-line error.
    failed: list[dict[str, str]] = field(default_factory=list)
    #: Every rank's critical path per step, on its own graph, and its time per GPU
    #: (analysis.path_ranks.STEP_SCHEMA, GPU_SCHEMA); None where not computed.
    paths: pl.DataFrame | None = None
    path_gpus: pl.DataFrame | None = None
    #: The critical path across ranks per step and the linked what-ifs
    #: (analysis.critical_ranks.JobCritical); None without two linked ranks or common steps.
    critical: Any = None


def _rank_hint(path: str) -> int | None:
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _trace_ranks(trace: Trace) -> list[int]:
    ranks: set[int] = set()
    for name in ("gpu", "cpu"):
        ranks |= {r for r in getattr(trace, name)["rank"].unique().to_list() if r is not None}
    return sorted(ranks) or [trace.meta.rank]


def assign_ranks(traces: list[Trace]) -> list[dict[int, int]]:
    """For each trace, a map from its own rank numbers to the job's.

    Single-rank traces keep the rank they record when those are all different (the normal
    torchrun case); otherwise ranks are numbered in order of the rank in the file name (if any),
    then the path, and a trace holding several ranks takes consecutive numbers.
    """
    return assign_rank_maps([_trace_ranks(t) for t in traces], [t.meta.rank for t in traces],
                            [t.meta.path for t in traces])


def assign_rank_maps(own: list[list[int]], recorded: list[int],
                     paths: list[str]) -> list[dict[int, int]]:
    """:func:`assign_ranks` from each trace's own ranks, recorded rank and path."""
    if all(len(r) == 1 for r in own) and len(set(recorded)) == len(own):
        return [{r[0]: rank} for r, rank in zip(own, recorded, strict=True)]
    order = sorted(range(len(own)), key=lambda i: (_rank_hint(paths[i]) is None,
                                                   _rank_hint(paths[i]) or 0, paths[i]))
    maps: list[dict[int, int]] = [{} for _ in own]
    next_rank = 0
    for i in order:
        for r in own[i]:
            maps[i][r] = next_rank
            next_rank += 1
    return maps


def combine(traces: list[Trace]) -> Trace:
    """Merge per-rank traces into one canonical trace (ranks renumbered by :func:`assign_ranks`)."""
    if not traces:
        raise ValueError("a job needs at least one trace")
    if len(traces) == 1:
        return traces[0]
    maps = assign_ranks(traces)
    bases = [t.meta.time_base_ns for t in traces]
    shift_all = all(b is not None for b in bases)
    origin = min(b for b in bases if b is not None) if shift_all else 0
    frames: dict[str, list[pl.DataFrame]] = {name: [] for name in FRAME_SCHEMAS}
    sources = []
    for trace, rank_map, base in zip(traces, maps, bases, strict=True):
        shift = (base - origin) if shift_all and base is not None else 0
        for name, frame in trace.frames().items():
            frames[name].append(_renumber(frame, rank_map, shift))
        sources.append({"path": trace.meta.path, "ranks": sorted(rank_map.values()),
                        "recorded_ranks": sorted(rank_map)})
    first = traces[0].meta
    formats = sorted({t.meta.source_format for t in traces})
    world = max(max(m.values()) + 1 for m in maps)
    meta = TraceMeta(
        path=os.path.commonpath([t.meta.path for t in traces]) if _same_root(traces) else
        first.path,
        source_format="+".join(formats),
        profiler=first.profiler,
        devices=list(first.devices),
        rank=min(min(m.values()) for m in maps),
        world_size=max(world, *(t.meta.world_size for t in traces)),
        time_base_ns=origin if shift_all else None,
        warnings=[f"{Path(t.meta.path).name}: {w}" for t in traces for w in t.meta.warnings],
        extra={"job": {"traces": sources,
                       "world_sizes": sorted({t.meta.world_size for t in traces})}},
    )
    return Trace(meta=meta, **{name: pl.concat(parts) for name, parts in frames.items()})


def _same_root(traces: list[Trace]) -> bool:
    try:
        return bool(os.path.commonpath([t.meta.path for t in traces]))
    except ValueError:
        return False


def _renumber(frame: pl.DataFrame, rank_map: dict[int, int], shift: int) -> pl.DataFrame:
    exprs = [pl.col("rank").replace_strict(list(rank_map), list(rank_map.values()),
                                           default=min(rank_map.values()),
                                           return_dtype=pl.Int32)]
    if shift:
        exprs += [(pl.col(c) + shift) for c in ("start_ns", "end_ns", "ts_ns") if c in frame.columns]
    return frame.with_columns(exprs)


def load_job(paths: Sequence[str | os.PathLike[str]], *, use_cache: bool = True,
             cache_dir: str | os.PathLike[str] | None = None) -> Trace:
    """Read each per-rank trace and combine them."""
    from traceanalyzer.ingest import load

    return combine([load(p, use_cache=use_cache, cache_dir=cache_dir) for p in paths])


def collective_instances(launches: pl.DataFrame, n_ranks: int) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Match communication kernels across ranks.

    Returns (per rank and instance: step, name, ordinal, rank, start_ns, lateness_ns;
    per instance: the summary columns of :attr:`JobResult.collectives`; the number of instances
    missing on some rank).
    """
    return instances_from(flagged_comm_kernels(launches.filter(pl.col("kind") == "kernel")),
                          n_ranks)


def instances_from(flagged: pl.DataFrame, n_ranks: int) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """:func:`collective_instances` from every rank's communication kernels, flagged by
    :func:`analysis.comm.flagged_comm_kernels` (what a job's workers send the client)."""
    comm = numbered(
        _with_counterparts(flagged.with_columns(_before_profiler=~pl.col("in_trace")))
        .select("rank", "step", "name", "stream", "start_ns", "end_ns")
        .with_columns(step=pl.col("step").fill_null(-1))
    )
    keys = ["step", "name", "ordinal"]
    counts = comm.group_by(keys).agg(n=pl.col("rank").n_unique())
    matched = comm.join(counts.filter(pl.col("n") == n_ranks), on=keys, how="semi")
    unmatched = counts.filter(pl.col("n") < n_ranks).height
    per_rank = matched.with_columns(
        lateness_ns=pl.col("start_ns") - pl.col("start_ns").min().over(keys)
    )
    instances = (
        per_rank.group_by(keys)
        .agg(
            first_start_ns=pl.col("start_ns").min(),
            last_start_ns=pl.col("start_ns").max(),
            latest_rank=pl.col("rank").sort_by("start_ns", "rank").last(),
            mean_duration_ns=(pl.col("end_ns") - pl.col("start_ns")).mean(),
        )
        .with_columns(skew_ns=pl.col("last_start_ns") - pl.col("first_start_ns"),
                      step=pl.when(pl.col("step") >= 0).then(pl.col("step")))
        .sort("first_start_ns", "name", "ordinal")
        .select("step", "name", "ordinal", "first_start_ns", "last_start_ns", "skew_ns",
                "latest_rank", "mean_duration_ns")
    )
    return per_rank, instances, unmatched


def _with_counterparts(comm: pl.DataFrame) -> pl.DataFrame:
    """``comm`` without the collectives that were running when a rank's profiler started (no
    launch recorded) and ended before any other rank recorded a collective: the other ranks
    cannot hold them, and counting them would shift that rank's ordinals in the step against
    theirs (DDP's last all-reduces of the step before profiling, seen on one rank only). Those
    another rank recorded too stay, and are matched."""
    firsts = comm.group_by("rank").agg(first=pl.col("start_ns").min()).sort("first", "rank")
    if firsts.height < 2:
        return comm.drop("_before_profiler")
    lowest_rank, lowest, second = firsts["rank"][0], firsts["first"][0], firsts["first"][1]
    others_first = pl.when(pl.col("rank") == lowest_rank).then(second).otherwise(lowest)
    kept = comm.filter(~pl.col("_before_profiler") | (pl.col("end_ns") >= others_first))
    return kept.drop("_before_profiler")


def rank_lateness(per_rank: pl.DataFrame, instances: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank: matched collectives, lateness mean/p50/max and how often it started last."""
    late = instances.filter(pl.col("skew_ns") > 0).group_by("latest_rank").agg(late_count=pl.len())
    stats = per_rank.group_by("rank").agg(
        collectives=pl.len(),
        lateness_mean_ns=pl.col("lateness_ns").mean(),
        lateness_p50_ns=pl.col("lateness_ns").median(),
        lateness_max_ns=pl.col("lateness_ns").max(),
    )
    base = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32})
    return (
        base.join(stats.cast({"rank": pl.Int32}), on="rank", how="left")
        .join(late.rename({"latest_rank": "rank"}).cast({"rank": pl.Int32}), on="rank", how="left")
        .with_columns(collectives=pl.col("collectives").fill_null(0).cast(pl.Int64),
                      late_count=pl.col("late_count").fill_null(0).cast(pl.Int64))
        .with_columns(late_share=pl.when(pl.col("collectives") > 0)
                      .then(pl.col("late_count") / pl.col("collectives")))
        .sort("rank")
    )


def hta_late_iterations(launches: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """HTA's late-start straggler count per rank (top 1 per iteration); see the module doc."""
    in_steps = launches.filter(pl.col("step").is_not_null())
    extents = in_steps.group_by("rank", "step").agg(start_ns=pl.col("start_ns").min(),
                                                    end_ns=pl.col("end_ns").max())
    comm = in_steps.filter(pl.col("kind") == "kernel", pl.col("category") == "communication")
    return hta_late_from(extents, comm, ranks)


def hta_late_from(extents: pl.DataFrame, comm: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """:func:`hta_late_iterations` from its parts: per (rank, step) the extent of the GPU work
    launched in the step (start_ns, end_ns) and the communication kernels (rank, stream, step,
    name, start_ns, end_ns; those outside steps are ignored)."""
    out_schema = {"rank": pl.Int32, "hta_late_iterations": pl.Int64}
    if extents.is_empty():
        return pl.DataFrame({"rank": ranks, "hta_late_iterations": [None] * len(ranks)},
                            schema=out_schema)
    n_iters = extents["step"].n_unique()
    t_min = extents["start_ns"].min()
    mean_iter = (extents["end_ns"].max() - t_min) / n_iters  # type: ignore[operator]  # Polars: scalar typed for any dtype
    long = comm.filter(
        pl.col("step").is_not_null(), pl.col("step") > 0,
        (pl.col("end_ns") - pl.col("start_ns")) >= mean_iter * HTA_MIN_NORMALIZED_DURATION,
    )
    last = (
        long.sort("start_ns", "end_ns")
        .group_by("rank", "stream", "step", "name", maintain_order=True)
        .agg(start_ns=pl.col("start_ns").last(),
             duration=(pl.col("end_ns") - pl.col("start_ns")).last() / mean_iter)
    )
    spread = (
        last.group_by("stream", "step", "name").agg(sd=pl.col("duration").std())
        .drop_nulls("sd").group_by("stream", "name").agg(sd=pl.col("sd").mean())
        .sort(["sd", "stream", "name"], descending=[True, False, False])
    )
    counts = pl.DataFrame(schema=out_schema)
    if not spread.is_empty():
        stream, name = spread.row(0)[:2]
        chosen = last.filter(pl.col("stream") == stream, pl.col("name") == name)
        counts = (
            chosen.sort("start_ns", "rank").group_by("step").agg(rank=pl.col("rank").last())
            .group_by("rank").agg(hta_late_iterations=pl.len().cast(pl.Int64))
            .cast(out_schema)
        )
    base = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32})
    return base.join(counts, on="rank", how="left").with_columns(
        pl.col("hta_late_iterations").fill_null(0)
    )


def pick_stragglers(lateness: pl.DataFrame, min_lateness_us: float = MIN_LATENESS_US) -> list[int]:
    """The rank the others wait for, if one stands out (see the module doc); else []."""
    rows = lateness.filter(pl.col("collectives") > 0).to_dicts()
    if len(rows) < 2:
        return []
    top = max(rows, key=lambda r: (r["late_count"], r["lateness_mean_ns"] or 0, -r["rank"]))
    others = max((r["lateness_mean_ns"] or 0) for r in rows if r is not top)
    mean = top["lateness_mean_ns"] or 0
    if (top["late_share"] or 0) >= 0.5 and mean >= min_lateness_us * 1e3 and mean >= 2 * others:
        return [int(top["rank"])]
    return []


def analyze_job(trace: Trace, *, rule_config: Any = None, rules: bool = True,
                min_lateness_us: float = MIN_LATENESS_US) -> JobResult:
    """Analyze a combined multi-rank trace (see :func:`combine`) as one job."""
    from traceanalyzer.analysis import analyze_trace, rank_table
    from traceanalyzer.analysis.critical_ranks import analyze_linked, views_anchors
    from traceanalyzer.analysis.views import Views

    views = Views(trace)
    result = analyze_trace(trace, rule_config=rule_config, rules=rules)
    ranks = views.ranks
    kernels = views.marked_launches.filter(pl.col("kind") == "kernel")
    sources = {r: src["path"] for src in trace.meta.extra.get("job", {}).get("traces", [])
               for r in src["ranks"]}
    sources = {r: sources.get(r, trace.meta.path) for r in ranks}
    job = job_from_parts(
        ranks=ranks, metrics=rank_table(views.metrics_by_rank).cast({"rank": pl.Int32}),
        comm=flagged_comm_kernels(kernels), exposed=views.exposed_comm,
        hta=hta_late_iterations(views.marked_launches, ranks), sources=sources,
        world_sizes=trace.meta.extra.get("job", {}).get("world_sizes", []),
        min_lateness_us=min_lateness_us, result=result)
    job.paths, job.path_gpus = result.critical_path_ranks, result.critical_path_gpus
    if job.per_rank is not None and windows_overlap(job.ranks):
        job.critical = analyze_linked(views_anchors(views), views.collectives, job.per_rank)
    return job


def job_from_parts(*, ranks: list[int], metrics: pl.DataFrame, comm: pl.DataFrame,
                   exposed: pl.DataFrame, hta: pl.DataFrame, sources: dict[int, str],
                   world_sizes: list[int], min_lateness_us: float = MIN_LATENESS_US,
                   result: AnalysisResult | None = None) -> JobResult:
    """The job from every rank's metrics (:func:`analysis.rank_table`), flagged communication
    kernels (:func:`analysis.comm.flagged_comm_kernels`), exposed transfer
    (:func:`analysis.comm.exposed_by_rank`) and HTA late iterations: the one assembly of a
    combined trace (:func:`analyze_job`) and of ranks reduced one by one
    (:func:`analysis.job_reduce.analyze_summaries`)."""
    warnings: list[str] = []
    if len(ranks) < 2:
        warnings.append("only one rank found: there is nothing to compare across ranks")
    with_comm = set(comm["rank"].unique().to_list())
    silent = [r for r in ranks if r not in with_comm]
    n_matched = len(ranks)
    if silent and len(with_comm) >= 2:
        # A rank with no collective at all (an empty trace, a profiler that missed the window)
        # would leave every collective unmatched: match the others, and say so.
        n_matched = len(with_comm)
        listed = ", ".join(map(str, silent[:10])) + (", ..." if len(silent) > 10 else "")
        warnings.append(f"{len(silent)} ranks have no communication kernels (rank {listed}); "
                        "collectives are matched across the other ranks")
    per_rank, instances, unmatched = instances_from(comm, n_matched)
    if unmatched:
        warnings.append(f"{unmatched} collectives were not found on every rank (profiled windows "
                        "that do not line up?); they are left out of lateness and skew")
    lateness = rank_lateness(per_rank, instances, ranks)
    stragglers = pick_stragglers(lateness, min_lateness_us)
    if not windows_overlap(metrics):
        warnings.append("the ranks' GPU activity does not overlap in time: these traces are not "
                        "from one run, or their clocks disagree; lateness and skew are not "
                        "meaningful and no straggler is named")
        stragglers = []
    if len(set(world_sizes)) > 1:
        warnings.append(f"the traces record different world sizes ({sorted(set(world_sizes))})")
    # The exposed communication the nccl-not-overlapped rule reports (steps only, when steps are
    # marked); the metrics' exposed_communication_ns stays the whole-trace HTA/TraceLens figure.
    # The figure the headline's metrics hold as exposed_transfer_ns (and comm_wait_ns).
    table = (
        metrics.join(lateness, on="rank", how="left")
        .join(exposed.drop("comm_wait_ns"), on="rank", how="left")
        .with_columns(pl.col("comm_wait_ns").fill_null(0))
        .with_columns(exposed_comm_pct=_of_span("exposed_comm_ns"),
                      comm_wait_pct=_of_span("comm_wait_ns"),
                      host_wait_pct=_of_span("idle_host_wait_ns"))
        .join(hta, on="rank", how="left")
        .with_columns(straggler=pl.col("rank").is_in(stragglers),
                      source=pl.col("rank").replace_strict(
                          list(sources), list(sources.values()), default=None,
                          return_dtype=pl.String))
        .sort("rank")
    )
    return JobResult(result=result, ranks=table, collectives=instances, stragglers=stragglers,
                     unmatched_collectives=unmatched, warnings=warnings, per_rank=per_rank)


def windows_overlap(metrics: pl.DataFrame) -> bool:
    """True when some moment lies inside every rank's GPU window (or there is < 2 windows)."""
    w = metrics.select("window_start_ns", "window_end_ns").drop_nulls()
    if w.height < 2:
        return True
    return bool(w["window_start_ns"].max() < w["window_end_ns"].min())  # type: ignore[operator]  # Polars: scalar typed for any dtype


def _of_span(column: str) -> pl.Expr:
    """``column`` as % of the rank's span; null for an empty span."""
    return pl.when(pl.col("span_ns") > 0).then(100.0 * pl.col(column) / pl.col("span_ns"))


def exposed_note(ranks: pl.DataFrame) -> str:
    """Which window the exposed-communication column covers: the rule nccl-not-overlapped's."""
    where = {"steps": "collectives launched inside profiler steps (set-up before the first step "
                      "left out)",
             "trace": "all collectives in the window (no marked steps; inferred steps are "
                      "not matched across ranks)"}
    by_window: dict[str, list[str]] = {}
    for rank, window in zip(ranks["rank"], ranks["exposed_comm_window"], strict=True):
        by_window.setdefault(window, []).append(str(rank))
    if len(by_window) == 1:
        which = where[next(iter(by_window))]
    else:
        which = "; ".join(f"rank {', '.join(rs)}: {where[w]}" for w, rs in sorted(by_window.items()))
    return (f"exposed transfer: {which}, the part of their transfers not covered by compute on "
            "the same GPU (the wait for other ranks, 'waited', left out); % of the rank's span. "
            "The figure of rule nccl-not-overlapped and of analyze's 'exposed transfer' on a "
            "file of every rank; analyze's 'exposed' counts whole collectives.")


def job_to_dict(job: JobResult, top: int = 50) -> dict[str, Any]:
    """The job as a deterministic JSON-able document (``traceanalyzer job --json``)."""
    from traceanalyzer.analysis.critical_ranks import to_dict as critical_dict
    from traceanalyzer.report.jsonout import SCHEMA_VERSION, clean, frame_rows, to_json_dict

    skew = job.collectives["skew_ns"]
    scale = job.scale
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "job",
        "ranks": [clean(r) for r in job.ranks.to_dicts()],
        "stragglers": list(job.stragglers),
        "collective_skew": {
            "instances": job.collectives.height,
            "unmatched": job.unmatched_collectives,
            "skew_mean_ns": clean(skew.mean()) if len(skew) else None,
            "skew_p50_ns": clean(skew.median()) if len(skew) else None,
            "skew_p95_ns": clean(skew.quantile(0.95, "nearest")) if len(skew) else None,
            "skew_max_ns": clean(skew.max()) if len(skew) else None,
        },
        "collectives": frame_rows(job.collectives.head(1000), "collectives"),
        "most_skewed": frame_rows(job.collectives.sort(["skew_ns", "first_start_ns"],
                                                       descending=[True, False]).head(top),
                                  "most_skewed"),
        "failed": list(job.failed),
        "warnings": list(job.warnings),
        "analysis": to_json_dict(job.result) if job.result is not None else None,
        "critical_path_by_rank": _paths_by_rank(job),
        "critical_path": clean(critical_dict(job.critical)) if job.critical is not None else None,
    }
    if scale is not None:
        doc.update({
            "distributions": [clean(r) for r in scale.distributions.to_dicts()],
            "hosts": ([clean(r) for r in scale.hosts.to_dicts()]
                      if scale.hosts is not None else None),
            "straggler_detail": [clean(s) for s in scale.stragglers],
            "job_findings": [clean(f) for f in scale.findings],
            "skew_growth": [clean(r) for r in scale.skew_growth.to_dicts()],
            "step_drift": [clean(r) for r in scale.drift.to_dicts()],
            "rank_findings": [clean(r) for r in scale.rank_findings.to_dicts()],
        })
    return doc


def _paths_by_rank(job: JobResult) -> list[dict[str, Any]]:
    """Per rank, its critical path (analysis.path_ranks.per_rank): mean per step by kind, the
    kind it is bound by, and its time on each GPU."""
    from traceanalyzer.analysis.path_ranks import per_rank
    from traceanalyzer.report.jsonout import clean

    if job.paths is None:
        return []
    return [clean(r) for r in per_rank(job.paths, job.path_gpus).to_dicts()]
