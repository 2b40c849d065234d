"""``traceanalyzer diff BEFORE AFTER``: what changed between two traces (any formats)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from traceanalyzer.cli.common import cache_options, report_options, window_option
from traceanalyzer.cli.rules import rule_options
from traceanalyzer.report.terminal import safe


@click.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@report_options
@click.option("--top", type=click.IntRange(0, 100_000), default=10, show_default=True,
              help="Kernels to list in the terminal and Markdown output.")
@window_option
@rule_options
@cache_options
def diff(before: Path, after: Path, json_path: Path | None, html_path: Path | None,
         markdown_path: Path | None, top: int, window: str, rule_config: Any, use_cache: bool,
         cache_dir: Path | None) -> None:
    """Compare BEFORE and AFTER: step time, busy and idle, per-kernel and per-category time,
    and which findings were resolved, are new, or remain."""
    from traceanalyzer.analysis.result_cache import analyze_path
    from traceanalyzer.cli.outputs import check_outputs
    from traceanalyzer.report import diff as report

    check_outputs([("--json", json_path), ("--html", html_path), ("--markdown", markdown_path)],
                  (before, after))
    results = [analyze_path(path, window=window, rule_config=rule_config, use_cache=use_cache,
                            cache_dir=cache_dir).result for path in (before, after)]
    result = report.diff_results(results[0], results[1])
    click.echo(report.render_terminal(result, top=top))
    if json_path:
        report.write_json(result, json_path)
    if html_path:
        report.write_html(result, html_path)
    if markdown_path:
        report.write_markdown(result, markdown_path, top=top)
    for out in (json_path, html_path, markdown_path):
        if out:
            click.echo(f"wrote {safe(out)}")
