"""``traceanalyzer analyze``: metrics, top kernels and findings for one or more traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from traceanalyzer.cli.common import (
    cache_options,
    report_options,
    trace_processor_option,
    window_option,
)
from traceanalyzer.cli.rules import rule_options
from traceanalyzer.errors import EXIT_FINDINGS, UsageError
from traceanalyzer.findings import SEVERITIES, fail_on_reason, severity_rank
from traceanalyzer.report.terminal import render_summary, safe


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@report_options
@click.option("--annotate", "annotate_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the trace plus a findings track (Chrome JSON or Perfetto) here.")
@click.option("--fail-on", type=click.Choice(SEVERITIES), default=None,
              help="Exit with code 1 when a finding has this severity or worse (for CI gating); "
                   "a finding's severity follows its impact (critical: 40% of the window or "
                   "more, high: 10%, medium: 3%, else low).")
@click.option("--top", default=10, show_default=True, help="Kernels to list in the summary.")
@click.option("--no-rules", is_flag=True, help="Compute metrics only; run no rules.")
@window_option
@click.option("--steps", "steps", help="Analyze only these steps (as the report numbers them): N "
              "or FIRST-LAST; takes precedence over --window.")
@click.option("--time-window", "time_window",
              help="Analyze only START:END after the first event, e.g. 100ms:2s.")
@click.option("--ranks", "ranks", help="Analyze only these ranks, e.g. 0,3.")
@rule_options
@trace_processor_option
@cache_options
def analyze(traces: tuple[Path, ...], json_path: Path | None, html_path: Path | None,
            markdown_path: Path | None, annotate_path: Path | None, fail_on: str | None,
            top: int, no_rules: bool, window: str, steps: str | None, time_window: str | None,
            ranks: str | None, rule_config: Any, trace_processor: Path | None, use_cache: bool,
            cache_dir: Path | None) -> None:
    """Analyze TRACES (Kineto JSON, Nsight Systems SQLite/.nsys-rep, Perfetto) and print where
    GPU time went and what to fix."""
    from traceanalyzer.analysis.result_cache import analyze_path
    from traceanalyzer.analysis.window import (
        Selection,
        parse_ranks,
        parse_steps,
        parse_time_window,
    )

    selection = Selection(steps=parse_steps(steps), time_window_ns=parse_time_window(time_window),
                          ranks=parse_ranks(ranks))
    outputs = [p for p in (json_path, html_path, markdown_path, annotate_path) if p]
    if len(traces) > 1 and outputs:
        raise UsageError("--json/--html/--markdown/--annotate take one trace; use `traceanalyzer "
                         "batch` for many")
    from traceanalyzer.report.annotate import _same_file

    for out in outputs:  # a report written over the trace would destroy the input
        if _same_file(traces[0], out):
            raise UsageError(f"{out}: refusing to overwrite the input trace; choose another path")
    worst, reasons = -1, []
    for path in traces:
        # Through the result cache: a re-run with the same trace, rules and selection skips
        # the analysis (traceanalyzer/analysis/result_cache.py says what the key covers).
        done = analyze_path(path, selection=selection, window=window, rule_config=rule_config,
                            rules=not no_rules, use_cache=use_cache, cache_dir=cache_dir,
                            trace_processor=trace_processor, need_trace=annotate_path is not None)
        result = done.result
        click.echo(render_summary(result, top=top))
        for o in result.rule_outcomes:
            if o.status == "error":  # a bug, not a verdict: say so where scripts look
                click.echo(f"warning: {safe(path)}: rule {o.slug} failed ({safe(o.reason)}) and "
                           "gave no verdict; please report it (TRACEANALYZER_DEBUG=1 shows the "
                           "traceback)", err=True)
        _write_outputs(result, done.trace, path, json_path, html_path, markdown_path,
                       annotate_path, timeline=done.timeline)
        for finding in result.findings:
            worst = max(worst, severity_rank(finding.severity))
        if fail_on is not None:
            reasons += fail_on_reason(result.findings, fail_on, safe(path) if len(traces) > 1 else "")
    if fail_on is not None and worst >= severity_rank(fail_on):
        for line in reasons:  # say which findings failed the build, where CI logs look
            click.echo(f"fail-on: {line}", err=True)
        raise SystemExit(EXIT_FINDINGS)


def _write_outputs(result: Any, trace: Any, path: Path, json_path: Path | None,
                   html_path: Path | None, markdown_path: Path | None,
                   annotate_path: Path | None, timeline: Any = None) -> None:
    if json_path:
        from traceanalyzer.report.jsonout import write_json

        write_json(result, json_path)
    if html_path:
        from traceanalyzer.report.html import write_html

        write_html(result, html_path, trace=trace, timeline=timeline)
    if markdown_path:
        from traceanalyzer.report.markdown import write_markdown

        write_markdown(result, markdown_path)
    if annotate_path:
        from traceanalyzer.report.annotate import write_annotated

        write_annotated(path, trace, result, annotate_path)
    for out in (json_path, html_path, markdown_path, annotate_path):
        if out:
            click.echo(f"wrote {safe(out)}")
