"""``traceanalyzer job``: several ranks' traces analyzed as one multi-rank job."""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any

import click

from traceanalyzer.cli.common import cache_options, fmt_ns, fmt_pct, safe, table
from traceanalyzer.cli.rules import rule_options


@click.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the job (per-rank table, stragglers, collective skew, the combined "
                   "analysis) as JSON here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a self-contained HTML page of the job here.")
@click.option("--min-lateness-us", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="A straggler must start its collectives at least this late on average.")
@click.option("--top", default=5, show_default=True, help="Most skewed collectives to list.")
@click.option("--no-rules", is_flag=True, help="Compute metrics only; run no rules.")
@rule_options
@cache_options
def job(inputs: tuple[str, ...], json_path: Path | None, html_path: Path | None,
        min_lateness_us: float, top: int,
        no_rules: bool, rule_config: Any, use_cache: bool, cache_dir: Path | None) -> None:
    """Analyze INPUTS (per-rank traces: files, a folder or globs; Kineto or Nsight Systems) as one
    distributed job: per-rank metrics side by side, straggler ranks, collective skew and exposed
    communication per rank."""
    from traceanalyzer.analysis.job import analyze_job, job_to_dict, load_job
    from traceanalyzer.batch import expand_inputs

    paths = expand_inputs(inputs)
    trace = load_job(paths, use_cache=use_cache, cache_dir=cache_dir)
    result = analyze_job(trace, rule_config=rule_config, rules=not no_rules,
                         min_lateness_us=min_lateness_us)
    click.echo(render_job(result, top=top))
    if json_path:
        from traceanalyzer.report._common import write_text_atomic
        from traceanalyzer.report.jsonout import dumps

        write_text_atomic(json_path, dumps(job_to_dict(result)))
        click.echo(f"wrote {safe(json_path)}")
    if html_path:
        from traceanalyzer.batch.index import job_section, render_page
        from traceanalyzer.report._common import write_text_atomic

        write_text_atomic(html_path, render_page("traceanalyzer job", [job_section(result, top)]))
        click.echo(f"wrote {safe(html_path)}")


def render_job(result: Any, top: int = 5) -> str:
    """The terminal view of a job."""
    from traceanalyzer.analysis.job import exposed_note

    ranks = result.ranks
    lines = [f"== job: {ranks.height} ranks"]
    rows = []
    for r in ranks.iter_rows(named=True):
        span = r["span_ns"] or 0
        rows.append([
            str(r["rank"]) + (" *" if r["straggler"] else ""),
            safe(PurePath(r["source"] or "").name, 32),
            fmt_ns(span), fmt_pct(r["busy_pct"]), fmt_pct(r["host_wait_pct"]),
            fmt_ns(r["communication_ns"]),
            fmt_ns(r["exposed_comm_ns"]),
            fmt_pct(r["exposed_comm_pct"]),
            fmt_ns(r["comm_wait_ns"]),
            fmt_ns(r["step_time_mean_ns"]),
            str(r["collectives"] or 0),
            fmt_ns(r["lateness_mean_ns"]), fmt_ns(r["lateness_max_ns"]),
            f"{r['late_count']}" + (f" ({100 * r['late_share']:.0f}%)"
                                    if r["late_share"] is not None else ""),
            "-" if r["hta_late_iterations"] is None else str(r["hta_late_iterations"]),
        ])
    lines += ["", table(rows, ["rank", "trace", "span", "busy", "host wait", "comm",
                               "exposed comm", "exposed %", "waited", "step mean", "colls",
                               "late mean", "late max", "started last", "HTA late iters"],
                        right=set(range(2, 15)))]
    lines.append(exposed_note(ranks))
    if result.stragglers:
        lines.append("")
        lines.append("Straggler: rank " + ", ".join(map(str, result.stragglers))
                     + " (starts its collectives last; the other ranks wait for it)")
    elif ranks.height > 1:
        lines += ["", "Straggler: none stands out."]
    coll = result.collectives
    if coll.height:
        skew = coll["skew_ns"]
        lines += ["", f"Collective skew over {coll.height} matched collectives: "
                      f"mean {fmt_ns(skew.mean())}, p50 {fmt_ns(skew.median())}, "
                      f"max {fmt_ns(skew.max())}"]
        worst = coll.sort(["skew_ns", "first_start_ns"], descending=[True, False]).head(top)
        wrows = [["-" if w["step"] is None else str(w["step"]), safe(w["name"], 60),
                  str(w["ordinal"]), fmt_ns(w["skew_ns"]), str(w["latest_rank"])]
                 for w in worst.iter_rows(named=True)]
        lines.append(table(wrows, ["step", "collective", "#", "skew", "last rank"],
                           right={2, 3, 4}))
    for warning in result.warnings:
        lines.append(f"warning: {safe(warning)}")
    return "\n".join(lines)
