"""``traceanalyzer analyze``: metrics, top kernels and findings for one or more traces."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from traceanalyzer.cli.common import (
    cache_options,
    interactive,
    report_options,
    trace_processor_option,
    window_option,
)
from traceanalyzer.cli.perf import perf_options
from traceanalyzer.cli.rules import rule_options
from traceanalyzer.errors import EXIT_FINDINGS, UsageError
from traceanalyzer.findings import SEVERITIES, fail_on_reason, severity_rank
from traceanalyzer.report.terminal import render_summary, safe


@click.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@report_options
@click.option("--quiet", "-q", "quiet", count=True,
              help="Print only the findings; -qq prints nothing but errors.")
@click.option("--verbose", "-v", "verbose", count=True,
              help="Also say (on stderr) where the cache is, whether the result came from it, "
                   "and how long each step took.")
@click.option("--annotate", "annotate_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the trace plus a findings track (Chrome JSON or Perfetto) here.")
@click.option("--fail-on", type=click.Choice(SEVERITIES), default=None,
              help="Exit with code 1 when a finding has this severity or worse (for CI gating); "
                   "a finding's severity follows its impact (critical: 40% of the GPU's active "
                   "span or more, high: 10%, medium: 3%, else low).")
@click.option("--top", type=click.IntRange(0, 100_000), default=10, show_default=True, help="Kernels to list in the summary.")
@click.option("--no-rules", is_flag=True, help="Compute metrics only; run no rules.")
@window_option
@click.option("--steps", "steps", help="Analyze only these steps (as the report numbers them): N "
              "or FIRST-LAST; takes precedence over --window.")
@click.option("--time-window", "time_window",
              help="Analyze only START:END after the first event, e.g. 100ms:2s.")
@click.option("--ranks", "ranks", help="Analyze only these ranks, e.g. 0,3.")
@click.option("--kernel-metrics", "kernel_metrics",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Nsight Compute metrics of kernels in the trace (.ncu-rep, or its CSV from "
                   "`ncu --import R --csv --page raw|details`): judged by the kernel rules and "
                   "matched to the trace's kernels by name, grid and block.")
@rule_options
@perf_options
@trace_processor_option
@cache_options
def analyze(traces: tuple[Path, ...], json_path: Path | None, html_path: Path | None,
            markdown_path: Path | None, quiet: int, verbose: int, annotate_path: Path | None, fail_on: str | None,
            top: int, no_rules: bool, window: str, steps: str | None, time_window: str | None,
            ranks: str | None, kernel_metrics: Path | None, rule_config: Any, perf: Any,
            trace_processor: Path | None, use_cache: bool, cache_dir: Path | None) -> None:
    """Analyze TRACES (Kineto JSON, Nsight Systems SQLite/.nsys-rep, Perfetto, Nsight Compute
    .ncu-rep or its CSV pages) and print where GPU time went and what to fix.

    --json -, --markdown - or --html - write that report to standard output; the summary then
    goes to standard error.
    """
    from traceanalyzer.analysis.result_cache import analyze_path
    from traceanalyzer.analysis.window import (
        Selection,
        parse_ranks,
        parse_steps,
        parse_time_window,
    )

    selection = Selection(steps=parse_steps(steps), time_window_ns=parse_time_window(time_window),
                          ranks=parse_ranks(ranks))
    for path in traces:
        if path.is_dir():
            raise UsageError(_folder_hint(path))
    outputs = [p for p in (json_path, html_path, markdown_path, annotate_path) if p]
    if len(traces) > 1 and outputs:
        raise UsageError("--json/--html/--markdown/--annotate take one trace; for independent "
                         f"traces run `traceanalyzer batch {_args(traces)} --out REPORTS`, for the "
                         f"ranks of one run `traceanalyzer job {_args(traces)}`")
    dashes = [p for p in (json_path, html_path, markdown_path) if p is not None and str(p) == "-"]
    if len(dashes) > 1:
        raise UsageError("only one of --json/--html/--markdown can write to standard output (-)")
    if annotate_path is not None and str(annotate_path) == "-":
        raise UsageError("--annotate needs a file name (.json, .json.gz, .pftrace or "
                         ".perfetto-trace), not -")
    from traceanalyzer.cli.outputs import check_outputs
    from traceanalyzer.report.annotate import check_annotate_path

    # Before the analysis: a wrong name costs nothing, and no output may replace an input.
    check_outputs([("--json", json_path), ("--html", html_path), ("--markdown", markdown_path),
                   ("--annotate", annotate_path)], traces)
    if annotate_path is not None:
        check_annotate_path(annotate_path, traces[0])
    to_stderr = bool(dashes)  # standard output carries the report: everything else to stderr
    worst, reasons = -1, []
    for path in traces:
        t0 = time.perf_counter()
        show_progress = quiet == 0 and interactive(sys.stderr) and _size(path) >= PROGRESS_BYTES
        if show_progress:  # only on a terminal: a log or a pipe gets no carriage returns
            click.echo(f"reading {safe(path.name)} ({_size(path) / 1e6:.0f} MB)...", err=True,
                       nl=False)
        # Through the result cache: a re-run with the same trace, rules and selection skips
        # the analysis (traceanalyzer/analysis/result_cache.py says what the key covers).
        done = analyze_path(path, selection=selection, window=window, rule_config=rule_config,
                            rules=not no_rules, use_cache=use_cache, cache_dir=cache_dir,
                            trace_processor=trace_processor, need_trace=annotate_path is not None,
                            kernel_metrics=kernel_metrics)
        if show_progress:
            click.echo("\r\033[K", err=True, nl=False)
        result = done.result
        result.perf_options = perf
        if verbose:
            _say_cache(path, done, use_cache, cache_dir, time.perf_counter() - t0)
        if quiet == 0:
            click.echo(render_summary(result, top=top), err=to_stderr)
        elif quiet == 1:
            click.echo(_findings_only(result, path), err=to_stderr, nl=False)
        for o in result.rule_outcomes:
            if o.status == "error":  # a bug, not a verdict: say so where scripts look
                click.echo(f"warning: {safe(path)}: rule {o.slug} failed ({safe(o.reason)}) and "
                           "gave no verdict; please report it (TRACEANALYZER_DEBUG=1 shows the "
                           "traceback)", err=True)
        t1 = time.perf_counter()
        _write_outputs(result, done.trace, path, json_path, html_path, markdown_path,
                       annotate_path, timeline=done.timeline, say=quiet == 0,
                       err=to_stderr)
        if verbose and outputs:
            click.echo(f"reports written in {time.perf_counter() - t1:.2f} s", err=True)
        for finding in result.findings:
            worst = max(worst, severity_rank(finding.severity))
        if fail_on is not None:
            reasons += fail_on_reason(result.findings, fail_on, safe(path) if len(traces) > 1 else "")
    if fail_on is not None and worst >= severity_rank(fail_on):
        for line in reasons:  # say which findings failed the build, where CI logs look
            click.echo(f"fail-on: {line}", err=True)
        raise SystemExit(EXIT_FINDINGS)


#: Traces at least this big show a "reading..." line while they load (on a terminal only).
PROGRESS_BYTES = 100 << 20


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _args(paths: Any) -> str:
    import shlex

    return " ".join(shlex.quote(str(p)) for p in paths)


def _folder_hint(path: Path) -> str:
    """What to run instead of ``analyze FOLDER``."""
    arg = _args([path])
    return (f"{path}: is a folder; `analyze` takes trace files. For the ranks of one distributed "
            f"run: `traceanalyzer job {arg}`; for independent traces: `traceanalyzer batch {arg} "
            f"--out {_args([path.with_name(path.name + '-reports')])}`")


def _say_cache(path: Path, done: Any, use_cache: bool, cache_dir: Path | None,
               seconds: float) -> None:
    from traceanalyzer.ingest.cache import cache_root

    if not use_cache:
        where = "cache: not used (--no-cache)"
    else:
        root = cache_root(cache_dir)
        state = "result from the cache" if done.cached else "computed, not from the cache"
        where = f"cache: {safe(path)}: {state} ({safe(root)})"
    click.echo(where, err=True)
    click.echo(f"{'loaded' if done.cached else 'analyzed'} in {seconds:.2f} s", err=True)


def _findings_only(result: Any, path: Path) -> str:
    """-q: one line per finding (nothing when there is none)."""
    lines = [f"{safe(path)}: {f.severity}: {safe(f.title)}" for f in result.findings]
    return "".join(line + "\n" for line in lines)


def _write_outputs(result: Any, trace: Any, path: Path, json_path: Path | None,
                   html_path: Path | None, markdown_path: Path | None,
                   annotate_path: Path | None, timeline: Any = None, say: bool = True,
                   err: bool = False) -> None:
    def stdout(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    from traceanalyzer.analysis.timings import step

    if json_path:
        from traceanalyzer.report.jsonout import render_json, write_json

        with step("json", "report"):
            if str(json_path) == "-":
                stdout(render_json(result))
            else:
                write_json(result, json_path)
    if html_path:
        from traceanalyzer.report.html import render_html, write_html

        with step("html", "report"):
            if str(html_path) == "-":
                stdout(render_html(result, trace=trace, timeline=timeline))
            else:
                write_html(result, html_path, trace=trace, timeline=timeline)
    if markdown_path:
        from traceanalyzer.report.markdown import render_markdown, write_markdown

        with step("markdown", "report"):
            if str(markdown_path) == "-":
                stdout(render_markdown(result))
            else:
                write_markdown(result, markdown_path)
    if annotate_path:
        from traceanalyzer.report.annotate import write_annotated

        with step("annotate", "report"):
            write_annotated(path, trace, result, annotate_path)
    for out in (json_path, html_path, markdown_path, annotate_path):
        if out and str(out) != "-" and say:
            click.echo(f"wrote {safe(out)}", err=err)
