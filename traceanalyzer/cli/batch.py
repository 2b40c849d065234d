"""``traceanalyzer batch``: analyze many traces in parallel into one output folder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from traceanalyzer.cli.common import cache_options, interactive, window_option
from traceanalyzer.cli.rules import rule_options


@click.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder: index.html, summary.parquet/.csv and reports/.")
@click.option("--workers", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes (local pool or LocalCluster) [default: CPU count].")
@click.option("--dask", "dask_address", metavar="ADDRESS|local", default=None,
              help="Run on a Dask cluster: a scheduler address (tcp://host:8786), a scheduler "
                   "file, or 'local' for a LocalCluster. Workers must see the trace paths.")
@click.option("--force", is_flag=True, help="Analyze every trace again, even if its report is "
                                            "up to date.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Kill a worker that spends more than this many seconds on one trace and "
                   "record the trace as failed (local pool only).")
@click.option("--job", "as_job", is_flag=True,
              help="Also analyze the traces as the ranks of one distributed job: job.json and "
                   "a job section (stragglers, collective skew) in index.html.")
@click.option("--no-rules", is_flag=True, help="Compute metrics only; run no rules.")
@click.option("--fail-on-error", is_flag=True,
              help="Exit with code 2 if any trace failed (they are always listed in the index).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary line.")
@window_option
@rule_options
@cache_options
def batch(inputs: tuple[str, ...], out_dir: Path, workers: int | None, dask_address: str | None,
          force: bool, timeout_s: float | None, as_job: bool, no_rules: bool, fail_on_error: bool,
          quiet: bool, window: str, rule_config: Any, use_cache: bool,
          cache_dir: Path | None) -> None:
    """Analyze INPUTS (trace files, folders or glob patterns, any mix of formats) in parallel.

    Writes one JSON and one HTML report per trace under --out, plus index.html (links, failed
    traces and their errors) and summary.parquet/summary.csv (one row per trace). A trace that
    cannot be read is recorded as failed and the batch goes on. Re-running skips traces whose
    report is up to date (same content, tool version and rules).
    """
    from traceanalyzer.batch import run_batch

    if timeout_s is not None and dask_address:
        raise click.UsageError("--timeout applies to the local pool only, not to --dask")
    result = run_batch(inputs, out_dir, workers=workers, dask=dask_address, force=force,
                       rules=not no_rules, rule_config=rule_config, window=window,
                       use_cache=use_cache,
                       cache_dir=cache_dir, timeout_s=timeout_s, job=as_job,
                       progress=not quiet and interactive(sys.stderr))
    if not quiet:
        from traceanalyzer.report.terminal import render_batch

        click.echo(render_batch(result))
    if fail_on_error and result.failed:
        raise SystemExit(2)
