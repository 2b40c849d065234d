"""``traceanalyzer analyze``: metrics, top kernels and findings for one or more traces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from traceanalyzer.cli.common import (
    cache_options,
    fmt_ns,
    fmt_pct,
    report_options,
    safe,
    table,
    trace_processor_option,
)
from traceanalyzer.cli.rules import rule_options
from traceanalyzer.errors import EXIT_FINDINGS, UsageError
from traceanalyzer.findings import SEVERITIES, fail_on_reason, severity_rank


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
@click.option("--steps", "steps", help="Analyze only these ProfilerSteps: N or FIRST-LAST.")
@click.option("--time-window", "time_window",
              help="Analyze only START:END after the first event, e.g. 100ms:2s.")
@click.option("--ranks", "ranks", help="Analyze only these ranks, e.g. 0,3.")
@rule_options
@trace_processor_option
@cache_options
def analyze(traces: tuple[Path, ...], json_path: Path | None, html_path: Path | None,
            markdown_path: Path | None, annotate_path: Path | None, fail_on: str | None,
            top: int, no_rules: bool, steps: str | None, time_window: str | None,
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
        done = analyze_path(path, selection=selection, rule_config=rule_config,
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


def render_summary(result: Any, top: int = 10) -> str:
    """The terminal summary of one analysis."""
    m, meta = result.metrics, result.meta
    lines = [f"== {safe(meta.path)} ({meta.source_format}, rank {m.rank} of {meta.world_size})"]
    devices = ", ".join(safe(d.name or f"device {d.id}") for d in meta.devices[:1])
    if devices:
        lines.append(f"   device: {devices}" + (f" (+{len(meta.devices) - 1} more)"
                                                  if len(meta.devices) > 1 else ""))
    for warning in meta.warnings:
        lines.append(f"   warning: {safe(warning)}")
    idle = m.idle_ns or 0
    rows = [
        ["GPU span", fmt_ns(m.span_ns), ""],
        ["GPU busy" + (f" ({result.gpus_note})" if result.gpus_note else ""), fmt_ns(m.busy_ns),
         fmt_pct(m.busy_pct)],
        ["GPU idle", fmt_ns(idle), fmt_pct(100 * idle / m.span_ns if m.span_ns else None)],
        ["  host wait", fmt_ns(m.idle_host_wait_ns), _share(m.idle_host_wait_ns, m.span_ns)],
        ["  kernel wait", fmt_ns(m.idle_kernel_wait_ns), _share(m.idle_kernel_wait_ns, m.span_ns)],
        ["  other", fmt_ns(m.idle_other_ns), _share(m.idle_other_ns, m.span_ns)],
        ["compute", fmt_ns(m.compute_ns), _share(m.compute_ns, m.span_ns)],
        ["communication", fmt_ns(m.communication_ns), _share(m.communication_ns, m.span_ns)],
        ["  exposed", fmt_ns(m.exposed_communication_ns),
         _share(m.exposed_communication_ns, m.span_ns)],
        ["memcpy/memset", fmt_ns(m.memory_ns), _share(m.memory_ns, m.span_ns)],
        ["kernels", str(m.kernel_count), ""],
    ]
    if m.step_count:
        rows += [
            ["steps", str(m.step_count), ""],
            ["step time mean/p50/p95",
             f"{fmt_ns(m.step_time_mean_ns)} / {fmt_ns(m.step_time_p50_ns)} / "
             f"{fmt_ns(m.step_time_p95_ns)}", ""],
            ["kernels per step", f"{m.kernels_per_step:.0f}" if m.kernels_per_step else "-", ""],
        ]
    if m.launch_delay_mean_ns is not None:
        rows.append(["launch delay mean/p95",
                     f"{fmt_ns(m.launch_delay_mean_ns)} / {fmt_ns(m.launch_delay_p95_ns)}", ""])
    if m.launch_overhead_pct is not None:
        rows.append(["launch API time", "", fmt_pct(m.launch_overhead_pct)])
    lines += ["", table(rows, ["metric", "value", "% of span"], right={1, 2})]
    if not result.kernels.is_empty():
        krows = [[safe(r["name"], 70), r["category"], str(r["instances"]), fmt_ns(r["total_ns"]),
                  fmt_ns(r["mean_ns"]), f"{r['pct_gpu_time']:.1f}%"]
                 for r in result.kernels.head(top).iter_rows(named=True)]
        lines += ["", f"Top {min(top, result.kernels.height)} kernels of {result.kernels.height}:",
                  table(krows, ["kernel", "category", "count", "total", "mean", "% GPU"],
                        right={2, 3, 4, 5})]
    lines.append("")
    if result.findings:
        lines.append(f"Findings ({len(result.findings)}, by impact):")
        for f in result.findings:
            lines.append(f"  [{f.severity}] {f.slug}: {safe(f.message)}")
            lines.append(f"      impact {fmt_ns(f.impact_ns)} ({f.impact_pct:.1f}% of window); "
                         f"fix: {safe(_first_sentence(f.fix))}")
        lines += [f"  Note: {note}" for note in result.notes()]
    elif result.rule_outcomes:
        lines.append("Findings: none.")
    skipped = [o for o in result.rule_outcomes if o.status == "not_applicable"]
    if skipped:
        lines.append("Not applicable: " + "; ".join(f"{o.slug} ({safe(o.reason)})" for o in skipped))
    errors = [o for o in result.rule_outcomes if o.status == "error"]
    if errors:
        lines.append("Rule errors (bugs in traceanalyzer, not verdicts on this trace): "
                     + "; ".join(f"{o.slug} ({safe(o.reason)})" for o in errors))
    return "\n".join(lines)


def _first_sentence(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    end = flat.find(". ")
    flat = flat[: end + 1] if end != -1 else flat
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _share(part: int | None, whole: int) -> str:
    return fmt_pct(100.0 * part / whole) if whole and part is not None else "-"
