"""The terminal output: plain aligned text for one analysis, a job, a batch and the rule list.

The commands of :mod:`traceanalyzer.cli` print what these functions return; the before/after
comparison has its terminal view beside its other outputs (:func:`traceanalyzer.report.diff.
render_terminal`). Every string that comes from a trace or a rule file goes through :func:`safe`,
so a hostile name cannot send escape sequences to the terminal.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Any, cast

from traceanalyzer.report._common import (
    EXPOSED_TRANSFER_LABEL,
    INFORMATIONAL,
    costs_nothing,
    counted,
    exposed_transfer,
    findings_by_rule,
    fmt_ns,
    header_notes,
    impact_text,
    memory_lines,
    multi_rank,
    other_ranks_text,
    rank_rows,
    step_rows,
)
from traceanalyzer.report.perf import perf_rows
from traceanalyzer.report.textsafe import csv_safe, json_text_safe, visible

if TYPE_CHECKING:
    import polars as pl

    from traceanalyzer.analysis.job import JobResult
    from traceanalyzer.analysis.result import AnalysisResult
    from traceanalyzer.batch.run import BatchResult


def safe(text: object, limit: int | None = None) -> str:
    """Untrusted text made safe for one terminal cell or line: control characters, bidi controls
    and lone surrogates written as visible escapes (``\\x1b``; :func:`.textsafe.visible`)."""
    out = visible(text)
    if limit is not None and len(out) > limit:
        out = out[: limit - 1] + "…"
    return out


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def table(rows: list[list[str]], headers: list[str], right: set[int] | None = None) -> str:
    """A plain aligned text table."""
    right = right or set()
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def frame_output(frame: pl.DataFrame, fmt: str) -> str:
    """A frame as csv, json (records) or an aligned table."""
    if fmt == "csv":  # formulas neutralised, control characters made visible
        return csv_safe(frame).write_csv()
    if fmt == "json":  # exact strings, with what a terminal acts on as \u escapes
        return json_text_safe(frame.write_json())
    rows = [[safe(v, 80) if isinstance(v, str) else _cell(v) for v in row] for row in frame.rows()]
    numeric = {i for i, dt in enumerate(frame.dtypes) if dt.is_numeric()}
    return table(rows, frame.columns, right=numeric)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


# -- one analysis (``traceanalyzer analyze``) -----------------------------------------------------


def _ranks_table(result: AnalysisResult) -> list[str]:
    rows = rank_rows(result)
    if not rows:
        return []
    body = [[str(r["rank"]) + (" *" if r["headline"] else ""), fmt_ns(r["step_p50_ns"]),
             fmt_pct(r["busy_pct"]), fmt_pct(r["host_wait_pct"]), fmt_pct(r["compute_pct"]),
             fmt_pct(r["communication_pct"]), fmt_pct(r["exposed_pct"])] for r in rows]
    return ["", f"Ranks in this file ({len(rows)}; the headline above is rank "
            f"{result.metrics.rank}'s, marked *; the rules judge each rank, and each finding "
            "names its rank; `traceanalyzer job` compares ranks):",
            table(body, ["rank", "step p50", "busy", "host wait", "compute", "comm", "exposed"],
                  right={1, 2, 3, 4, 5, 6})]


def _steps_table(result: AnalysisResult) -> list[str]:
    rows, total = step_rows(result)
    if not rows:
        return []
    shown = "" if len(rows) == total else f", the {len(rows)} slowest shown"
    body = [[str(r["step"]), fmt_ns(r["duration_ns"]), fmt_pct(r["busy_pct"]),
             fmt_pct(r["host_wait_pct"]), fmt_pct(r["kernel_wait_pct"]), fmt_pct(r["other_pct"]),
             str(r["kernels"]), str(r["launches"]), r["mark"]] for r in rows]
    return ["", f"Steps ({total}{shown}; idle as % of each step):",
            table(body, ["step", "time", "busy", "host wait", "kernel wait", "other", "kernels",
                         "launches", "note"], right={0, 1, 2, 3, 4, 5, 6, 7})]


def _paths_table(result: AnalysisResult) -> list[str]:
    """Each rank's critical path, where the trace holds several ranks or a rank several GPUs
    (report/paths_view.py)."""
    from traceanalyzer.report.paths_view import GPU_LABEL, TITLE, result_path_table

    heads, rows = result_path_table(result)
    if not rows:
        return []
    right = {i for i, h in enumerate(heads) if i not in (0, 3) and h != GPU_LABEL}
    return ["", f"{TITLE}:", table(rows, heads, right=right)]


def render_summary(result: AnalysisResult, top: int = 10) -> str:
    """The terminal summary of one analysis: metrics, the ``top`` kernels, findings."""
    m, meta = result.metrics, result.meta
    lines = [f"== {safe(meta.path)} ({meta.source_format}, rank {m.rank} of {meta.world_size})"]
    for fact in header_notes(result):  # wrapped at words, as the window line always was
        lines += wrapped(f"{fact.label}: {safe(fact.text)}", "     ", "   ")
    for warning in meta.warnings:
        lines += wrapped(f"warning: {safe(warning)}", "     ", "   ")
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
    ]
    transfer = exposed_transfer(m)
    if transfer is not None:
        # docs/metrics.md: exposed less the collectives' wait for other ranks (the rule's figure)
        rows.append([f"  {EXPOSED_TRANSFER_LABEL}", fmt_ns(transfer), _share(transfer, m.span_ns)])
    rows += [
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
    perf_notes = []
    for row in perf_rows(result):
        if row.reason:  # too long for the table's value column: a note under it
            perf_notes.append(f"{row.label}: {row.reason}")
        rows.append([row.label, row.value, ""])
    if m.launch_delay_mean_ns is not None:
        rows.append(["launch delay mean/p95",
                     f"{fmt_ns(m.launch_delay_mean_ns)} / {fmt_ns(m.launch_delay_p95_ns)}", ""])
    if m.launch_overhead_pct is not None:
        rows.append(["launch API time", "", fmt_pct(m.launch_overhead_pct)])
    lines += ["", table(rows, ["metric", "value", "% of span"], right={1, 2})]
    lines += [f"  {safe(note)}" for note in perf_notes]
    lines += _ranks_table(result)
    lines += _steps_table(result)
    lines += _paths_table(result)
    lines += _memory_section(result)
    if not result.kernels.is_empty():
        krows = [[safe(r["name"], KERNEL_NAME_WIDTH), r["category"], str(r["instances"]), fmt_ns(r["total_ns"]),
                  fmt_ns(r["mean_ns"]), f"{r['pct_gpu_time']:.1f}%"]
                 for r in result.kernels.head(top).iter_rows(named=True)]
        lines += ["", f"Top {counted(min(top, result.kernels.height), 'kernel')} of {result.kernels.height}:",
                  table(krows, ["kernel", "category", "count", "total", "mean", "% GPU"],
                        right={2, 3, 4, 5})]
    lines += _ncu_section(result)
    lines.append("")
    if result.findings:
        by_rule = findings_by_rule(result.findings)
        several = multi_rank(result)
        ranks = len({f.rank for f in result.findings})
        count = (f"{len(result.findings)}: {counted(len(by_rule), 'rule')} on "
                 f"{counted(ranks, 'rank')}" if several else len(result.findings))
        lines.append(f"Findings ({count}, by impact):")
        for f, others in by_rule:
            # Wrapped to WIDTH at words: a message's lines go on at 6 spaces, the cost and
            # fix line's at 8, so a reader (or a script) tells where each begins.
            who = f" (rank {f.rank})" if several and f.rank is not None else ""
            lines += wrapped(f"[{f.severity}] {f.slug}{who}: {safe(f.message)}", "      ", "  ")
            cost = (INFORMATIONAL if costs_nothing(f)
                    else f"impact {impact_text(f)}")
            if others:
                cost += f"; {other_ranks_text(others)}"
            fix = _first_sentence(f.fix)
            if fix.endswith("…"):  # cut short: say where the whole text is
                fix += f" (all of it: --html, --markdown, or `traceanalyzer rules show {f.slug}`)"
            lines += wrapped(f"{cost}; fix: {safe(fix)}", "        ", "      ")
        for note in result.notes():
            lines += wrapped(f"Note: {note}", "    ", "  ")
        lines += _whatif_section(result)
    elif result.rule_outcomes:
        lines.append("Findings: none.")
    skipped = [o for o in result.rule_outcomes if o.status == "not_applicable"]
    if skipped:
        # Rules that lack the same input share one reason (the seven kernel rules without
        # Nsight Compute metrics): said once, after their names, in the rules' order.
        by_reason: dict[str, list[str]] = {}
        for o in skipped:
            by_reason.setdefault(o.reason or "", []).append(o.slug)
        lines += wrapped("Not applicable: " + "; ".join(
            f"{', '.join(slugs)} ({safe(reason)})" for reason, slugs in by_reason.items()),
            "  ", "")
    errors = [o for o in result.rule_outcomes if o.status == "error"]
    if errors:
        lines.append("Rule errors (bugs in traceanalyzer, not verdicts on this trace): "
                     + "; ".join(f"{o.slug} ({safe(o.reason)})" for o in errors))
    return visible("\n".join(lines), keep_newlines=True)  # and whatever a field missed


#: The terminal's width: the header lines, the findings and the what-if wrap to it.
WIDTH = 100
#: Kernel names in the top-kernel table are cut to this (the table then fits WIDTH).
KERNEL_NAME_WIDTH = 55


def wrapped(text: str, indent: str, first: str | None = None, width: int = WIDTH) -> list[str]:
    """``text`` wrapped at word boundaries to ``width`` columns (a word longer than a line, such
    as a kernel name, stands on its own line, whole), the first line led by ``first``."""
    import textwrap

    lead = indent if first is None else first
    return textwrap.wrap(text, width=width, initial_indent=lead, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [lead.rstrip()]


def _whatif_section(result: AnalysisResult) -> list[str]:
    """The what-if table (report/whatif_view.py): the same rows, figures and labels as the HTML
    and Markdown reports, the assumptions listed under it."""
    from traceanalyzer.report.whatif_view import TITLE, whatif_view

    view = whatif_view(result)
    if view is None:
        return []
    body = [[safe(c) for c in r.cells(view.multi_rank)] for r in [*view.rows, *view.totals]]
    first = 1 if view.multi_rank else 0
    right = set(range(first + 1, first + 4))
    lines = ["", f"{TITLE}:", *wrapped(view.intro(), "  "),
             *("  " + line for line in table(body, view.columns, right=right).splitlines())]
    if (note := view.differs_note()):
        lines += wrapped(note, "    ", "  ")
    lines.append("  Assumes:")
    for r in [*view.rows, *view.totals]:
        who = r.label + (f" (rank {r.rank})" if view.multi_rank and r.rank is not None else "")
        lines += wrapped(f"{who}: {safe(r.assumes)}", "      ", "    ")
    return lines


def _ncu_section(result: AnalysisResult) -> list[str]:
    """Nsight Compute's profiled launches and their verdicts (report/ncu.py)."""
    from traceanalyzer.report import ncu

    found = ncu.rows(result)
    if not found:
        return []
    cols = ("Kernel", "Grid", "Block", "Nsight Compute", "Timeline", "Occupancy", "Verdict",
            "Findings")
    body = [[safe(r[c], 50 if c == "Kernel" else 80) for c in cols] for r in found]
    return ["", f"Nsight Compute: {safe(ncu.summary(result))}",
            table(body, list(cols), right={3})]


def _memory_section(result: AnalysisResult) -> list[str]:
    lines = memory_lines(result)
    return ["", "Device memory:", *(f"  {safe(line)}" for line in lines)] if lines else []


def _first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of ``text``, cut at a word (never mid-word) to ``limit`` characters,
    with "…" where it was cut."""
    flat = " ".join(text.split())
    end = flat.find(". ")
    flat = flat[: end + 1] if end != -1 else flat
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit - 1)
    cut = cut if cut > limit // 2 else limit - 1
    return flat[:cut].rstrip(" ,;:(") + " …"


def _share(part: int | None, whole: int) -> str:
    return fmt_pct(100.0 * part / whole) if whole and part is not None else "-"


# -- a multi-rank job (``traceanalyzer job``, ``batch --job``) ------------------------------------


#: Jobs of at most this many ranks print their per-rank table; larger ones print distributions
#: (the full table is in the JSON, Parquet and HTML outputs).
JOB_TABLE_MAX_RANKS = 16


def render_job(result: JobResult, top: int = 5) -> str:
    """The terminal view of a job: ranks side by side (small jobs) or the distributions of the
    per-rank metrics, stragglers, hosts, the ``top`` skewed collectives and cross-rank
    findings."""
    ranks = result.ranks
    scale = result.scale
    hosts = scale.hosts if scale is not None else None
    head = f"== job: {counted(ranks.height, 'rank')}"
    if hosts is not None and hosts.height > 1:
        head += f" on {counted(hosts.height, 'host')}"
    if result.failed:
        head += f"; {counted(len(result.failed), 'trace')} failed to load"
    lines = [head]
    if ranks.height <= JOB_TABLE_MAX_RANKS:
        lines += _job_rank_table(result)
    else:
        lines += ["", f"(the per-rank table of {ranks.height:,} rows is in --json, --parquet and "
                      "--html)"]
    lines += _job_paths(result)
    if scale is not None and scale.distributions.height and ranks.height > 2:
        lines += ["", "Per-rank metrics over the ranks:", _distribution_table(scale.distributions)]
    if result.stragglers:
        lines.append("")
        lines.append("Straggler: rank " + ", ".join(map(str, result.stragglers))
                     + " (starts its collectives last; the other ranks wait for it)")
    elif ranks.height > 1:
        lines += ["", "Straggler: none stands out."]
    if scale is not None:
        lines += [f"  {safe(f['message'])}" for f in scale.findings
                  if f["kind"].startswith("straggler")]
    if hosts is not None and hosts.height > 1:
        shown = hosts.head(top)
        hrows = [[safe(h["host"] or "-", 40), str(h["ranks"]), str(h["first_rank"]),
                  fmt_ns(h["lateness_mean_ns"]), f"{100 * h['late_share']:.0f}%",
                  fmt_ns(h["step_time_mean_ns"]), fmt_pct(h["busy_pct"])]
                 for h in shown.iter_rows(named=True)]
        lines += ["", f"Hosts, latest first ({shown.height} of {hosts.height}):",
                  table(hrows, ["host", "ranks", "first rank", "late mean", "started last",
                                "step mean", "busy"], right=set(range(1, 7)))]
    coll = result.collectives
    if coll.height:
        skew = coll["skew_ns"]
        mean, p50, most = (cast("float | None", v)
                           for v in (skew.mean(), skew.median(), skew.max()))
        lines += ["", f"Collective skew over {coll.height} matched collectives: "
                      f"mean {fmt_ns(mean)}, p50 {fmt_ns(p50)}, max {fmt_ns(most)}"]
        worst = coll.sort(["skew_ns", "first_start_ns"], descending=[True, False]).head(top)
        wrows = [["-" if w["step"] is None else str(w["step"]), safe(w["name"], 60),
                  str(w["ordinal"]), fmt_ns(w["skew_ns"]), str(w["latest_rank"])]
                 for w in worst.iter_rows(named=True)]
        lines.append(table(wrows, ["step", "collective", "#", "skew", "last rank"],
                           right={2, 3, 4}))
    if result.critical is not None:
        from traceanalyzer.analysis.critical_ranks import render_lines

        lines += [""] + [safe(line, 400) for line in render_lines(result.critical)]
    if scale is not None:
        others = [f for f in scale.findings if not f["kind"].startswith("straggler")]
        if others:
            lines += ["", "Cross-rank findings:"]
            lines += [f"  [{f['kind']}] {safe(f['message'])}" for f in others]
        rf = scale.rank_findings
        if rf.height:
            from traceanalyzer.report.whatif_view import JOB_SAVING_LABEL, job_savings

            frows = [[safe(f["slug"]), safe(f["severity"]), f"{f['ranks']:,}",
                      fmt_ns(f["impact_ns"]), ", ".join(map(str, f["top_ranks"])),
                      job_savings(f.get("what_if_by_rank"))]
                     for f in rf.head(10).iter_rows(named=True)]
            lines += ["", "Per-rank findings (rules on each rank's trace; each rank's what-if "
                      "on its own graph):",
                      table(frows, ["rule", "severity", "ranks", "impact (sum)", "worst ranks",
                                    JOB_SAVING_LABEL], right={2, 3})]
    for failed in result.failed[:10]:
        lines.append(f"failed: {safe(failed['error'])}")
    if len(result.failed) > 10:
        lines.append(f"failed: ... and {len(result.failed) - 10} more (listed in --json)")
    for warning in result.warnings:
        lines.append(f"warning: {safe(warning)}")
    return visible("\n".join(lines), keep_newlines=True)  # and whatever a field missed


def _job_paths(result: JobResult) -> list[str]:
    """Each rank's critical path (report/paths_view.py), for jobs of at most
    JOB_TABLE_MAX_RANKS ranks; then the ranks' count by the kind their path is bound by."""
    from traceanalyzer.analysis.path_ranks import per_rank
    from traceanalyzer.report.paths_view import GPU_LABEL, SHORT, TITLE, path_table

    if result.paths is None or result.paths.is_empty():
        return []
    frame = per_rank(result.paths, result.path_gpus)
    if frame.height > JOB_TABLE_MAX_RANKS:
        counts = frame.group_by("bound_by").len().sort(["len", "bound_by"],
                                                        descending=[True, False])
        said = ", ".join(f"{SHORT[r['bound_by']]} on {counted(r['len'], 'rank')}"
                         for r in counts.iter_rows(named=True))
        return ["", f"Critical path bound by: {said} (per rank in --json)"]
    heads, rows = path_table(frame)
    right = {i for i, h in enumerate(heads) if i not in (0, 3) and h != GPU_LABEL}
    return ["", f"{TITLE}:", table(rows, heads, right=right)]


def _job_rank_table(result: JobResult) -> list[str]:
    from traceanalyzer.analysis.job import exposed_note

    ranks = result.ranks
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
    return ["", table(rows, ["rank", "trace", "span", "busy", "host wait", "comm",
                             "exposed transfer", "exposed %", "waited", "step mean", "colls",
                             "late mean", "late max", "started last", "HTA late iters"],
                      right=set(range(2, 15))), exposed_note(ranks)]


def fmt_metric(value: Any, unit: str) -> str:
    """A per-rank metric's value in its unit (analysis.job_scale.DISTRIBUTED)."""
    if value is None:
        return "-"
    if unit == "ns":
        return fmt_ns(value)
    if unit == "pct":
        return fmt_pct(value)
    if unit == "share":
        return f"{100 * value:.0f}%"
    return f"{value:,.0f}"


def _distribution_table(dist: pl.DataFrame) -> str:
    rows = []
    for d in dist.iter_rows(named=True):
        unit = d["unit"]
        listed = ", ".join(map(str, d["outlier_ranks"]))
        more = d["outliers"] - len(d["outlier_ranks"])
        outliers = (f"{d['outliers']}: {listed}" + (f", +{more}" if more > 0 else "")
                    if d["outliers"] else "-")
        rows.append([d["metric"], *(fmt_metric(d[k], unit) for k in ("min", "p50", "p95", "max")),
                     outliers])
    return table(rows, ["metric", "min", "p50", "p95", "max", "outlier ranks"],
                 right={1, 2, 3, 4})


# -- a batch (``traceanalyzer batch``) ------------------------------------------------------------


def render_batch(result: BatchResult) -> str:
    """The lines ``traceanalyzer batch`` ends with: counts, failed traces, the job, the index."""
    total = result.analyzed + result.skipped + result.failed
    lines = [f"{total} traces: {result.analyzed} analyzed, {result.skipped} up to date, "
             f"{result.failed} failed in {result.seconds:.1f} s"]
    lines += [f"  failed: {safe(error)}" for error in result.errors]
    excluded = getattr(result, "excluded", [])
    if excluded:  # the batch's own outputs, reports, annotated copies: say so, briefly
        lines.append(f"left out {len(excluded)} files that are not traces to analyze "
                     f"(e.g. {safe(excluded[0][0])}: {excluded[0][1]})")
    if result.job is not None:
        lines.append(render_job(result.job))
    lines.append(f"wrote {safe(result.out_dir / 'index.html')}")
    return visible("\n".join(lines), keep_newlines=True)  # and whatever a field missed


# -- the rules (``traceanalyzer rules list``) -----------------------------------------------------


def render_rules(rows: list[dict[str, Any]]) -> str:
    """The rule list as a table: one row per rule (``id``, ``slug``, ``severity``, ``enabled``,
    ``title``, and the parameters in effect)."""
    return table(
        [[safe(r["id"]), safe(r["slug"]), safe(r["severity"]), "on" if r["enabled"] else "off",
          safe(r["title"], 60), safe(" ".join(f"{k}={v}" for k, v in r["parameters"].items()))]
         for r in rows],
        ["id", "slug", "severity", "state", "title", "parameters"],
    )
