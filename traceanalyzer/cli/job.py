"""``traceanalyzer job``: several ranks' traces analyzed as one multi-rank job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from traceanalyzer.cli.common import cache_options, window_option
from traceanalyzer.cli.rules import rule_options
from traceanalyzer.report.terminal import render_job, safe


@click.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the job (per-rank table, stragglers, collective skew, the combined "
                   "analysis) as JSON here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write a self-contained HTML page of the job here.")
@click.option("--min-lateness-us", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="A straggler must start its collectives at least this late on average.")
@click.option("--top", type=click.IntRange(0, 100_000), default=5, show_default=True, help="Most skewed collectives to list.")
@click.option("--no-rules", is_flag=True, help="Compute metrics only; run no rules.")
@window_option
@rule_options
@cache_options
def job(inputs: tuple[str, ...], json_path: Path | None, html_path: Path | None,
        min_lateness_us: float, top: int, no_rules: bool, window: str, rule_config: Any,
        use_cache: bool, cache_dir: Path | None) -> None:
    """Analyze INPUTS (per-rank traces: files, a folder or globs; Kineto or Nsight Systems) as one
    distributed job: per-rank metrics side by side, straggler ranks, collective skew and exposed
    communication per rank."""
    from traceanalyzer.analysis.job import analyze_job, job_to_dict, load_job
    from traceanalyzer.analysis.window import choose_window
    from traceanalyzer.batch.inputs import expand_inputs
    from traceanalyzer.cli.outputs import check_outputs, input_patterns

    paths = expand_inputs(inputs)
    check_outputs([("--json", json_path), ("--html", html_path)], paths, input_patterns(inputs))
    trace = choose_window(load_job(paths, use_cache=use_cache, cache_dir=cache_dir), window)
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
