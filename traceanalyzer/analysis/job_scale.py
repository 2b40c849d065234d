"""A job read at 1,000 ranks: distributions, hosts, and the cross-rank findings.

From a :class:`analysis.job.JobResult` (its per-rank table, matched collectives and per-rank
lateness) and the per-step durations of every rank, :func:`scale_view` computes:

- **distributions**: for each per-rank metric of :data:`DISTRIBUTED`, min, p50, p95 (nearest
  rank), max over the ranks, and the outlier ranks: those further from the median than
  :data:`OUTLIER_MADS` scaled median absolute deviations and than :data:`OUTLIER_MIN_REL` of the
  median (so a metric every rank shares to the nanosecond flags no one);
- **hosts**: ranks grouped by the host their trace names (nsys Hostname, Kineto ``hostname``,
  tensorboard_trace_handler's file name), with each host's mean lateness and share of the
  matched collectives one of its ranks started last;
- **stragglers**: each straggler rank, and a straggler host (a host whose ranks start last in
  at least half the collectives, late on average by at least ``min_lateness_us`` and twice any
  other host's, and holding no straggler rank, whose lateness it would only repeat), with how
  consistently it is late (share of collectives, steps in which it
  started last in at least half the step's collectives) and its **cost** to the other ranks:
  per collective it started last, each other rank's wait, its start minus theirs;
- **skew growth**: collectives (name, ordinal) matched in at least :data:`MIN_TREND_STEPS`
  steps whose skew rises with the step (correlation >= :data:`MIN_TREND_R`) by at least
  ``min_lateness_us`` and to at least twice its fitted first-step value over the window;
- **step-time drift**: ranks whose step duration trends (correlation >= :data:`MIN_TREND_R`)
  by at least :data:`DRIFT_MIN_PCT` points of their median step more than the ranks' median
  trend, over at least :data:`MIN_TREND_STEPS` steps (a job that slows down as a whole is not
  one rank's drift).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

#: (column, unit) of the per-rank metrics summarised as distributions; unit "ns", "pct", "share"
#: or "count".
DISTRIBUTED = [
    ("span_ns", "ns"),
    ("busy_pct", "pct"),
    ("step_time_mean_ns", "ns"),
    ("step_time_p95_ns", "ns"),
    ("compute_ns", "ns"),
    ("communication_ns", "ns"),
    ("exposed_comm_pct", "pct"),
    ("comm_wait_pct", "pct"),
    ("host_wait_pct", "pct"),
    ("lateness_mean_ns", "ns"),
    ("lateness_max_ns", "ns"),
    ("late_share", "share"),
    ("launch_delay_p50_ns", "ns"),
    ("findings", "count"),
]
#: A rank is an outlier of a metric beyond this many scaled MADs (1.4826 x MAD ~ one standard
#: deviation of a normal distribution) from the median...
OUTLIER_MADS = 3.0
#: ...and beyond this share of the median's magnitude (ranks equal to the ns flag no one).
OUTLIER_MIN_REL = 0.05
#: Outlier ranks listed per metric (the JSON has them all in the per-rank table).
OUTLIERS_LISTED = 5
MIN_TREND_STEPS = 4
MIN_TREND_R = 0.8
DRIFT_MIN_PCT = 10.0


@dataclass
class JobScale:
    distributions: pl.DataFrame
    #: Per host: host, ranks, first_rank, lateness_mean_ns, late_share, step_time_mean_ns,
    #: busy_pct; None when no trace names its host.
    hosts: pl.DataFrame | None
    stragglers: list[dict[str, Any]]
    skew_growth: pl.DataFrame
    drift: pl.DataFrame
    #: Per rule of the per-rank findings: slug, severity, ranks, impact_ns, top_ranks.
    rank_findings: pl.DataFrame
    #: Cross-rank findings: kind, severity, message, ranks, host, impact_ns.
    findings: list[dict[str, Any]] = field(default_factory=list)


def distributions(ranks: pl.DataFrame) -> pl.DataFrame:
    """min / p50 / p95 / max and the outlier ranks of each metric of :data:`DISTRIBUTED`."""
    rows = []
    for column, unit in DISTRIBUTED:
        if column not in ranks.columns:
            continue
        v = ranks.select("rank", x=pl.col(column).cast(pl.Float64)).drop_nulls("x")
        if v.is_empty():
            continue
        med = float(v["x"].median())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
        dev = (v["x"] - med).abs()
        mad = float(dev.median()) * 1.4826
        bound = max(OUTLIER_MADS * mad, OUTLIER_MIN_REL * abs(med))
        out = (
            v.with_columns(dev=dev)
            .filter(pl.col("dev") > bound)
            .sort(["dev", "rank"], descending=[True, False])
        )
        rows.append(
            {
                "metric": column,
                "unit": unit,
                "ranks": v.height,
                "min": v["x"].min(),
                "p50": med,
                "p95": v["x"].quantile(0.95, "nearest"),
                "max": v["x"].max(),
                "outliers": out.height,
                "outlier_ranks": out["rank"].head(OUTLIERS_LISTED).to_list(),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.String,
            "unit": pl.String,
            "ranks": pl.Int64,
            "min": pl.Float64,
            "p50": pl.Float64,
            "p95": pl.Float64,
            "max": pl.Float64,
            "outliers": pl.Int64,
            "outlier_ranks": pl.List(pl.Int32),
        },
    )


def _cost(per_rank: pl.DataFrame, instances: pl.DataFrame, late: list[int]) -> pl.DataFrame:
    """Per rank outside ``late``: its wait for ``late`` (the ranks' latest start minus its own)
    summed over the collectives one of ``late`` started last."""
    keys = ["step", "name", "ordinal"]
    chosen = instances.filter(pl.col("latest_rank").is_in(late)).select(
        pl.col("step").fill_null(-1), "name", "ordinal", "last_start_ns"
    )
    return (
        per_rank.filter(~pl.col("rank").is_in(late))
        .join(chosen, on=keys)
        .group_by("rank")
        .agg(cost_ns=(pl.col("last_start_ns") - pl.col("start_ns")).sum())
    )


def _late_steps(instances: pl.DataFrame, late: list[int]) -> tuple[int, int]:
    """(steps in which ``late`` started last in at least half the collectives, steps)."""
    stepped = instances.filter(pl.col("step").is_not_null())
    if stepped.is_empty():
        return 0, 0
    by_step = stepped.group_by("step").agg(
        share=(pl.col("latest_rank").is_in(late) & (pl.col("skew_ns") > 0)).mean()
    )
    return int((by_step["share"] >= 0.5).sum()), by_step.height


def _straggler(
    job: Any, late: list[int], kind: str, host: str | None, spans: pl.DataFrame
) -> dict[str, Any]:
    inst = job.collectives
    n = inst.filter(pl.col("skew_ns") > 0).height
    last = inst.filter(pl.col("skew_ns") > 0, pl.col("latest_rank").is_in(late)).height
    late_steps, steps = _late_steps(inst, late)
    cost = _cost(job.per_rank, inst, late).join(spans, on="rank", how="left")
    others = job.ranks.height - len(late)
    total = int(cost["cost_ns"].sum()) if cost.height else 0
    per_rank = total / others if others else 0.0
    pct = (
        cost.select((100 * pl.col("cost_ns") / pl.col("span_ns")).mean()).item()
        if cost.height
        else None
    )
    lat = job.ranks.filter(pl.col("rank").is_in(late))["lateness_mean_ns"].mean()
    return {
        "kind": kind,
        "ranks": late,
        "host": host,
        "late_share": last / n if n else None,
        "late_collectives": last,
        "collectives": n,
        "late_steps": late_steps,
        "steps": steps,
        "lateness_mean_ns": lat,
        "cost_ns": total,
        "cost_per_rank_ns": per_rank,
        "cost_pct_of_span": pct,
        "others": others,
    }


def hosts_table(ranks: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame | None:
    if "host" not in ranks.columns or ranks["host"].drop_nulls().n_unique() < 1:
        return None
    n = max(instances.filter(pl.col("skew_ns") > 0).height, 1)
    host_of = ranks.select("rank", "host")
    last = (
        instances.filter(pl.col("skew_ns") > 0)
        .join(host_of.rename({"rank": "latest_rank"}), on="latest_rank", how="left")
        .group_by("host")
        .agg(late_share=pl.len() / n)
    )
    return (
        ranks.group_by("host")
        .agg(
            ranks=pl.len(),
            first_rank=pl.col("rank").min(),
            lateness_mean_ns=pl.col("lateness_mean_ns").mean(),
            step_time_mean_ns=pl.col("step_time_mean_ns").mean(),
            busy_pct=pl.col("busy_pct").mean(),
        )
        .join(last, on="host", how="left")
        .with_columns(pl.col("late_share").fill_null(0.0))
        .sort(["lateness_mean_ns", "first_rank"], descending=[True, False], nulls_last=True)
    )


def _late_host(hosts: pl.DataFrame | None, min_lateness_us: float) -> str | None:
    if hosts is None or hosts.height < 2:
        return None
    top = hosts.row(0, named=True)
    others = hosts["lateness_mean_ns"].slice(1).max() or 0.0
    mean = top["lateness_mean_ns"] or 0.0
    if top["late_share"] >= 0.5 and mean >= min_lateness_us * 1e3 and mean >= 2 * float(others):  # type: ignore[arg-type]
        return str(top["host"])
    return None


def _trend(frame: pl.DataFrame, by: str | list[str], y: str) -> pl.DataFrame:
    """Least-squares trend of ``y`` over ``step`` per group: steps, r, fitted first and last."""
    return (
        frame.group_by(by)
        .agg(
            steps=pl.len(),
            first_step=pl.col("step").min(),
            last_step=pl.col("step").max(),
            r=pl.corr("step", y),
            slope=pl.cov("step", y) / pl.col("step").var(),
            mean_y=pl.col(y).mean(),
            mean_x=pl.col("step").mean(),
            median_y=pl.col(y).median(),
        )
        .filter(pl.col("steps") >= MIN_TREND_STEPS)
        .with_columns(
            fitted_first=pl.col("mean_y")
            + pl.col("slope") * (pl.col("first_step") - pl.col("mean_x")),
            fitted_last=pl.col("mean_y")
            + pl.col("slope") * (pl.col("last_step") - pl.col("mean_x")),
        )
        .with_columns(r=pl.col("r").fill_nan(None))
    )


def skew_growth(instances: pl.DataFrame, min_lateness_us: float) -> pl.DataFrame:
    t = _trend(
        instances.filter(pl.col("step").is_not_null()).with_columns(
            pl.col("skew_ns").cast(pl.Float64)
        ),
        ["name", "ordinal"],
        "skew_ns",
    )
    return (
        t.filter(
            pl.col("r") >= MIN_TREND_R,
            pl.col("fitted_last") - pl.col("fitted_first") >= min_lateness_us * 1e3,
            pl.col("fitted_last") >= 2 * pl.col("fitted_first"),
        )
        .select(
            "name",
            "ordinal",
            "steps",
            "first_step",
            "last_step",
            "r",
            first_skew_ns="fitted_first",
            last_skew_ns="fitted_last",
            growth_ns_per_step="slope",
        )
        .sort(["growth_ns_per_step", "name", "ordinal"], descending=[True, False, False])
    )


def step_drift(steps: pl.DataFrame) -> pl.DataFrame:
    t = _trend(
        steps.drop_nulls("duration_ns").with_columns(pl.col("duration_ns").cast(pl.Float64)),
        "rank",
        "duration_ns",
    )
    t = t.with_columns(
        drift_pct=100 * (pl.col("fitted_last") - pl.col("fitted_first")) / pl.col("median_y")
    )
    if t.is_empty():
        return t.select(
            "rank", "steps", "r", "drift_pct", first_ns="fitted_first", last_ns="fitted_last"
        ).with_columns(relative_pct=pl.lit(None, pl.Float64))
    job_drift = t["drift_pct"].median()
    return (
        t.with_columns(relative_pct=pl.col("drift_pct") - job_drift)
        .filter(pl.col("r").abs() >= MIN_TREND_R, pl.col("relative_pct").abs() >= DRIFT_MIN_PCT)
        .select(
            "rank",
            "steps",
            "r",
            "drift_pct",
            "relative_pct",
            first_ns="fitted_first",
            last_ns="fitted_last",
        )
        .sort(["relative_pct", "rank"], descending=[True, False])
    )


def rank_findings(findings: pl.DataFrame) -> pl.DataFrame:
    """Per rule: its worst severity, ranks, summed impact, the summed what-if saving per step
    (null where no rank's finding has a prediction) and each rank's what-if, and the top
    ranks."""
    for c in ("what_if_step_time_ns", "what_if_saving_ns"):  # summaries made before them
        if c not in findings.columns:
            findings = findings.with_columns(pl.lit(None, pl.Int64).alias(c))
    order = {"critical": 0, "warning": 1, "info": 2}
    if findings.is_empty():
        return pl.DataFrame(
            schema={
                "slug": pl.String,
                "severity": pl.String,
                "ranks": pl.Int64,
                "impact_ns": pl.Int64,
                "what_if_saving_ns": pl.Int64,
                "what_if_by_rank": pl.List(
                    pl.Struct({"rank": pl.Int32, "step_time_ns": pl.Int64, "saving_ns": pl.Int64})
                ),
                "top_ranks": pl.List(pl.Int32),
            }
        )
    return (
        findings.with_columns(_sev=pl.col("severity").replace_strict(order, default=3))
        .sort(["impact_ns", "rank"], descending=[True, False])
        .group_by("slug")
        .agg(
            severity=pl.col("severity").sort_by("_sev").first(),
            ranks=pl.col("rank").n_unique(),
            impact_ns=pl.col("impact_ns").sum(),
            # Each rank's predicted saving per step on its own graph, summed (null: no model).
            what_if_saving_ns=pl.when(pl.col("what_if_saving_ns").is_not_null().any()).then(
                pl.col("what_if_saving_ns").sum()
            ),
            # Per rank (by impact): its step time with the fix and the saving, on its graph.
            what_if_by_rank=pl.struct(
                "rank",
                step_time_ns="what_if_step_time_ns",
                saving_ns="what_if_saving_ns",
            ),
            top_ranks=pl.col("rank").unique(maintain_order=True).head(5),
        )
        .sort(["ranks", "impact_ns", "slug"], descending=[True, True, False])
    )


def scale_view(
    job: Any, steps: pl.DataFrame, findings: pl.DataFrame, min_lateness_us: float
) -> JobScale:
    """The job at scale (module doc). ``steps``: rank, step, duration_ns; ``findings``: the
    per-rank findings (analysis.job_reduce.FINDING_SCHEMA)."""
    from traceanalyzer.report._common import fmt_ns

    hosts = hosts_table(job.ranks, job.collectives)
    spans = job.ranks.select("rank", "span_ns")
    stragglers = []
    out: list[dict[str, Any]] = []
    host_of = (
        dict(zip(job.ranks["rank"], job.ranks["host"], strict=True))
        if "host" in job.ranks.columns
        else {}
    )
    for r in job.stragglers:
        stragglers.append(_straggler(job, [r], "rank", host_of.get(r), spans))
    late_host = _late_host(hosts, min_lateness_us)
    if late_host is not None and any(host_of.get(r) == late_host for r in job.stragglers):
        late_host = None  # its lateness is its straggler rank's, already named
    if late_host is not None:
        members = job.ranks.filter(pl.col("host") == late_host)["rank"].to_list()
        stragglers.append(_straggler(job, members, "host", late_host, spans))
    for s in stragglers:
        who = (
            f"rank {s['ranks'][0]}" + (f" (host {s['host']})" if s["host"] else "")
            if s["kind"] == "rank"
            else f"host {s['host']} ({len(s['ranks'])} ranks)"
        )
        share = f"{100 * s['late_share']:.0f}%" if s["late_share"] is not None else "-"
        steps_txt = f", in {s['late_steps']} of {s['steps']} steps" if s["steps"] else ""
        pct = (
            f", {s['cost_pct_of_span']:.1f}% of their span"
            if s["cost_pct_of_span"] is not None
            else ""
        )
        out.append(
            {
                "kind": f"straggler-{s['kind']}",
                "severity": "warning" if (s["cost_pct_of_span"] or 0) >= 1.0 else "info",
                "message": (
                    f"{who} starts last in {share} of the collectives{steps_txt}, "
                    f"{fmt_ns(s['lateness_mean_ns'])} late on average; the other "
                    f"{s['others']} ranks wait {fmt_ns(s['cost_per_rank_ns'])} each for it"
                    f"{pct}"
                ),
                "ranks": s["ranks"],
                "host": s["host"],
                "impact_ns": int(s["cost_per_rank_ns"]),
            }
        )
    growth = skew_growth(job.collectives, min_lateness_us)
    for g in growth.head(5).iter_rows(named=True):
        out.append(
            {
                "kind": "skew-growth",
                "severity": "warning",
                "message": (
                    f"skew of {g['name'][:80]} #{g['ordinal']} grows from "
                    f"{fmt_ns(g['first_skew_ns'])} to {fmt_ns(g['last_skew_ns'])} over steps "
                    f"{g['first_step']}-{g['last_step']} (r = {g['r']:.2f})"
                ),
                "ranks": [],
                "host": None,
                "impact_ns": int(g["last_skew_ns"] - g["first_skew_ns"]),
            }
        )
    if growth.height > 5:
        out.append(
            {
                "kind": "skew-growth",
                "severity": "info",
                "ranks": [],
                "host": None,
                "message": f"{growth.height - 5} more collectives whose skew grows",
                "impact_ns": 0,
            }
        )
    drift = step_drift(steps)
    for d in drift.head(5).iter_rows(named=True):
        out.append(
            {
                "kind": "step-drift",
                "severity": "warning",
                "message": (
                    f"rank {d['rank']}'s step time drifts from {fmt_ns(d['first_ns'])} to "
                    f"{fmt_ns(d['last_ns'])} over {d['steps']} steps ({d['drift_pct']:+.0f}%, "
                    f"{d['relative_pct']:+.0f} points more than the ranks' median)"
                ),
                "ranks": [d["rank"]],
                "host": host_of.get(d["rank"]),
                "impact_ns": int(abs(d["last_ns"] - d["first_ns"])),
            }
        )
    if drift.height > 5:
        out.append(
            {
                "kind": "step-drift",
                "severity": "info",
                "ranks": [],
                "host": None,
                "message": f"{drift.height - 5} more ranks whose step time drifts",
                "impact_ns": 0,
            }
        )
    return JobScale(
        distributions=distributions(job.ranks),
        hosts=hosts,
        stragglers=stragglers,
        skew_growth=growth,
        drift=drift,
        rank_findings=rank_findings(findings),
        findings=out,
    )
