"""``traceanalyzer job``: several ranks' traces analyzed as one multi-rank job."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from traceanalyzer.cli.common import cache_options, interactive, window_option
from traceanalyzer.cli.rules import rule_options
from traceanalyzer.report.terminal import render_job, safe


@click.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the job (per-rank table, distributions, stragglers, collective skew, "
                   "findings, failed traces) as JSON here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a self-contained HTML page of the job (with the sortable per-rank "
                   "table) here.")
@click.option("--parquet", "parquet_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the per-rank table as Parquet here.")
@click.option("--workers", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes that load the ranks (local pool, or the LocalCluster of "
                   "--dask local) [default: CPU count]; 1 loads them in this process.")
@click.option("--dask", "dask_address", metavar="ADDRESS|local", default=None,
              help="Load and reduce the ranks on a Dask cluster: a scheduler address "
                   "(tcp://host:8786), a scheduler file, or 'local' for a LocalCluster. Workers "
                   "must see the trace paths.")
@click.option("--min-lateness-us", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="A straggler must start its collectives at least this late on average.")
@click.option("--top", type=click.IntRange(0, 100_000), default=5, show_default=True,
              help="Most skewed collectives (and latest hosts) to list.")
@click.option("--no-rules", is_flag=True, help="Compute metrics only; run no rules on the ranks.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@window_option
@rule_options
@cache_options
def job(inputs: tuple[str, ...], json_path: Path | None, html_path: Path | None,
        parquet_path: Path | None, workers: int | None, dask_address: str | None,
        min_lateness_us: float, top: int, no_rules: bool, quiet: bool, window: str,
        rule_config: Any, use_cache: bool, cache_dir: Path | None) -> None:
    """Analyze INPUTS (per-rank traces: files, a folder or globs; Kineto or Nsight Systems) as one
    distributed job: per-rank metrics and their distribution, straggler ranks and hosts,
    collective skew, exposed communication per rank, and cross-rank findings.

    Each rank is loaded and reduced in a worker (local processes, or Dask with --dask); only
    small per-rank frames come back, so hundreds of ranks fit in the client's memory. A trace
    that fails to load is listed and the job is analyzed without it."""
    from traceanalyzer.batch.inputs import expand_inputs
    from traceanalyzer.batch.job import run_job
    from traceanalyzer.cli.outputs import check_outputs, input_patterns

    paths = expand_inputs(inputs)
    check_outputs([("--json", json_path), ("--html", html_path), ("--parquet", parquet_path)],
                  paths, input_patterns(inputs))
    result = run_job(paths, workers=workers, dask=dask_address, rules=not no_rules,
                     rule_config=rule_config, window=window, use_cache=use_cache,
                     cache_dir=cache_dir, min_lateness_us=min_lateness_us,
                     progress=not quiet and interactive(sys.stderr))
    click.echo(render_job(result, top=top))
    write_job_outputs(result, top, json_path=json_path, html_path=html_path,
                      parquet_path=parquet_path)


def write_job_outputs(result: Any, top: int, *, json_path: Path | None = None,
                      html_path: Path | None = None, parquet_path: Path | None = None,
                      echo: bool = True) -> None:
    """The job's JSON, HTML page and Parquet per-rank table, each where asked."""
    from traceanalyzer.report._common import write_text_atomic

    if json_path:
        from traceanalyzer.analysis.job import job_to_dict
        from traceanalyzer.report.jsonout import dumps

        write_text_atomic(json_path, dumps(job_to_dict(result)))
    if html_path:
        from traceanalyzer.batch.index import render_job_page

        write_text_atomic(html_path, render_job_page(result, top))
    if parquet_path:
        from traceanalyzer.report._common import atomic_write

        atomic_write(parquet_path, lambda fh: result.ranks.write_parquet(fh, statistics=False))
    if echo:
        for path in (json_path, html_path, parquet_path):
            if path:
                click.echo(f"wrote {safe(path)}")
