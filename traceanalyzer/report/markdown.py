"""``--markdown``: a short summary to paste into a pull request or a chat message."""

from __future__ import annotations

import os
import re
from pathlib import PurePath
from typing import Any

from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.report._common import (
    EXPOSED_TRANSFER_LABEL,
    INFORMATIONAL,
    costs_nothing,
    counted,
    exposed_transfer,
    findings_by_rule,
    fmt_ns,
    fmt_pct,
    header_notes,
    impact_text,
    memory_lines,
    multi_rank,
    other_ranks_text,
    pct_of,
    rank_rows,
    step_rows,
    write_text_atomic,
)
from traceanalyzer.report.perf import perf_rows
from traceanalyzer.report.textsafe import visible

#: Trace warnings listed in the summary.
MAX_WARNINGS = 3
#: Findings listed in the summary; the HTML and JSON reports have them all.
MAX_FINDINGS = 5
_SEVERITY_MARK = {"critical": "🔴", "high": "🟠", "medium": "🟡", "low": "🔵", "info": "⚪"}
# Characters with inline meaning; block markers (#, -, +, =, >, 1.) are escaped at the start.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()|~])")
_BLOCK_START = re.compile(r"^(?=[#+\-=])")
_ORDERED_START = re.compile(r"^(\d+)\.")  # "1." (a ")" is escaped with the specials)
#: Where GitHub's renderer would turn text into a link: a scheme's "://" (extended URL
#: autolinks), "www." (extended www autolinks), "@" (e-mail autolinks, mailto:/xmpp: ones and
#: @mentions) and "#" before a digit (issue references). A zero-width joiner (U+200D) after the
#: trigger breaks each rule's pattern and is invisible when rendered.
_AUTOLINK_TRIGGER = re.compile(r"(?<=:)(?=//)|(?i:(?<=www)(?=\.))|(?<=@)|(?<=#)(?=\d)")
ZWJ = "\u200d"


def md_escape(text: Any) -> str:
    """Untrusted text as inert Markdown inline text (GFM as GitHub renders it): no links or
    autolinks, no images, no HTML, no table breaks, no headings or lists, no emphasis."""
    s = " ".join(str(text).split())  # one line: newlines would end a table row or a list item
    # Terminal escape sequences (ESC, BEL, C1, bidi overrides) would act when the file is printed
    # with cat, or reorder what a reader sees: shown as visible escapes (\x1b) instead.
    s = visible(s)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _BLOCK_START.sub("\\\\", _MD_SPECIAL.sub(r"\\\1", s))
    s = _ORDERED_START.sub(r"\1\\.", s)
    return _AUTOLINK_TRIGGER.sub(ZWJ, s)


def render_markdown(result: AnalysisResult) -> str:
    """The summary as Markdown text."""
    m = result.metrics
    meta = result.meta
    name = PurePath(meta.path).name or meta.path
    lines = [f"### traceanalyzer: {md_escape(name)}", ""]
    facts = [md_escape(meta.profiler or meta.source_format)]
    if meta.world_size > 1:
        facts.append(f"rank {meta.rank} of {meta.world_size}")
    facts.append(counted(m.step_count, "step") if m.step_count else "no steps found")
    lines += [" · ".join(facts), ""]
    for fact in header_notes(result):
        lines += [f"**{fact.title}:** {md_escape(fact.text)}", ""]
    rows = [
        ("Step time (mean / p50 / p95)",
         " / ".join(fmt_ns(x) for x in (m.step_time_mean_ns, m.step_time_p50_ns,
                                         m.step_time_p95_ns)) if m.step_count else "–"),
        ("GPU busy" + (f" ({result.gpus_note})" if result.gpus_note else ""), fmt_pct(m.busy_pct)),
        ("Idle: host wait / kernel wait / other",
         " / ".join(fmt_pct(pct_of(x, m.span_ns)) for x in
                    (m.idle_host_wait_ns, m.idle_kernel_wait_ns, m.idle_other_ns))),
        ("Compute / communication / exposed comm. / memcpy",
         " / ".join(fmt_pct(pct_of(x, m.span_ns)) for x in
                    (m.compute_ns, m.communication_ns, m.exposed_communication_ns,
                     m.memory_ns))),
        *([(EXPOSED_TRANSFER_LABEL.capitalize(),
            f"{fmt_pct(pct_of(transfer, m.span_ns))} ({fmt_ns(transfer)})")]
          if (transfer := exposed_transfer(m)) is not None else []),
        ("Kernels per step", "–" if m.kernels_per_step is None else f"{m.kernels_per_step:.0f}"),
        ("Launch API time (CPU)", fmt_pct(m.launch_overhead_pct)),
        # Capitalized like the rows above ("model FLOPs per step" is a terminal row's label).
        *[(r.label[:1].upper() + r.label[1:],
           md_escape(f"{r.value} ({r.reason})" if r.reason else r.value))
          for r in perf_rows(result)],
    ]
    lines += ["| Metric | Value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines.append("")
    ranks = rank_rows(result)
    if ranks:
        lines += [f"**Ranks in this file** ({len(ranks)}; the figures above are rank "
                  f"{result.metrics.rank}'s; the rules judge each rank, and each finding names "
                  "its rank)", "",
                  "| Rank | Step p50 | Busy | Host wait | Compute | Comm. | Exposed |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['rank']} | {fmt_ns(r['step_p50_ns'])} | {fmt_pct(r['busy_pct'])} | "
                  f"{fmt_pct(r['host_wait_pct'])} | {fmt_pct(r['compute_pct'])} | "
                  f"{fmt_pct(r['communication_pct'])} | {fmt_pct(r['exposed_pct'])} |"
                  for r in ranks]
        lines.append("")
    steps, total = step_rows(result)
    if steps:
        shown = "" if len(steps) == total else f", the {len(steps)} slowest shown"
        lines += [f"**Steps** ({total}{shown}; idle as % of each step)", "",
                  "| Step | Time | Busy | Host wait | Kernel wait | Other | Kernels | Launches | |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r['step']} | {fmt_ns(r['duration_ns'])} | {fmt_pct(r['busy_pct'])} | "
                  f"{fmt_pct(r['host_wait_pct'])} | {fmt_pct(r['kernel_wait_pct'])} | "
                  f"{fmt_pct(r['other_pct'])} | {r['kernels']} | {r['launches']} | {r['mark']} |"
                  for r in steps]
        lines.append("")
    lines += _paths_section(result)
    lines += _memory_section(result)
    findings = result.findings
    if findings:
        lines.append(f"**Findings** ({len(findings)}, most costly first)")
        lines.append("")
        for note in result.notes():
            lines += [md_escape(note), ""]
        by_rule = findings_by_rule(findings)
        several = multi_rank(result)
        for f, others in by_rule[:MAX_FINDINGS]:
            mark = _SEVERITY_MARK.get(f.severity, "")
            who = f" (rank {f.rank})" if several and f.rank is not None else ""
            lines.append(
                f"- {mark} **{md_escape(f.severity)}** `{_code(f.rule_id)}`{who} "
                f"{md_escape(f.message)} — "
                + (INFORMATIONAL if costs_nothing(f) else
                   f"costs {impact_text(f)}")
                + (f"; {other_ranks_text(others)}" if others else "")
                + f". *Fix:* {md_escape(f.fix)}"
            )
        if len(by_rule) > MAX_FINDINGS:
            lines.append(f"- … and {counted(len(by_rule) - MAX_FINDINGS, 'more rule')} "
                         "in the full report")
        lines += _whatif_section(result)
    else:
        lines.append("**No findings.**")
    errors = [o for o in result.rule_outcomes if o.status == "error"]
    if errors:
        lines += ["", f"⚠️ {len(errors)} rule(s) failed with an error in traceanalyzer and gave "
                  "no verdict: " + "; ".join(f"`{_code(o.slug)}` ({md_escape(o.reason)})"
                                             for o in errors)]
    if result.kernels is not None and not result.kernels.is_empty():
        top = result.kernels.sort("total_ns", descending=True).head(3)
        lines += ["", "Top kernels: " + "; ".join(
            f"{md_escape(_short(r['name']))} ({fmt_pct(r.get('pct_gpu_time'))})"
            for r in top.to_dicts())]
    lines += _ncu_section(result)
    if meta.warnings:
        # Each warning says what the numbers above mean on this trace: shown, not only counted.
        lines += ["", f"⚠️ {counted(len(meta.warnings), 'trace warning')}:"]
        lines += [f"- {md_escape(w)}" for w in meta.warnings[:MAX_WARNINGS]]
        if len(meta.warnings) > MAX_WARNINGS:
            lines.append(f"- and {len(meta.warnings) - MAX_WARNINGS:,} more: see the full report.")
    return "\n".join(lines) + "\n"


def _paths_section(result: AnalysisResult) -> list[str]:
    """Each rank's critical path, where the trace holds several ranks or a rank several GPUs."""
    from traceanalyzer.report.paths_view import GPU_LABEL, TITLE, result_path_table

    heads, rows = result_path_table(result)
    if not rows:
        return []
    align = ["---" if i == 3 or h == GPU_LABEL else "---:" for i, h in enumerate(heads)]
    return [f"**{TITLE}**", "", "| " + " | ".join(heads) + " |", "|" + "|".join(align) + "|",
            *("| " + " | ".join(row) + " |" for row in rows), ""]


def _whatif_section(result: AnalysisResult) -> list[str]:
    """The what-if table (report/whatif_view.py): the HTML's rows, figures and labels."""
    from traceanalyzer.report.whatif_view import ASSUMES_LABEL, TITLE, whatif_view

    view = whatif_view(result)
    if view is None:
        return []
    cols = [*view.columns, ASSUMES_LABEL]
    first = 1 if view.multi_rank else 0
    numeric = {*range(first + 1, first + 4), *([0] if view.multi_rank else [])}
    align = ["---:" if i in numeric else "---" for i in range(len(cols))]
    out = ["", f"**{TITLE}**", "", md_escape(view.intro()), "",
           "| " + " | ".join(md_escape(c) for c in cols) + " |", "|" + "|".join(align) + "|"]
    for r in [*view.rows, *view.totals]:
        # The figures are the tool's own text ("12.021 ms *"), written as they are; the label
        # (a rule's slug) as code.
        cells = [c.replace("*", "\\*") for c in r.cells(view.multi_rank)]
        label = f"`{_code(r.label)}`" if r.finding is not None else f"**{md_escape(r.label)}**"
        cells[first] = label
        out.append("| " + " | ".join([*cells, md_escape(r.assumes)]) + " |")
    if (note := view.differs_note()):
        out += ["", md_escape(note)]
    return out


def _ncu_section(result: AnalysisResult) -> list[str]:
    """Nsight Compute's profiled launches and their verdicts (report/ncu.py)."""
    from traceanalyzer.report import ncu

    found = ncu.rows(result)
    if not found:
        return []
    cols = ("Kernel", "Grid", "Block", "Nsight Compute", "Timeline", "Occupancy", "Top stall",
            "Verdict", "Findings")
    out = ["", f"**Nsight Compute** ({md_escape(ncu.summary(result))})", "",
           "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(md_escape(_short(r[c]) if c == "Kernel" else r[c]) for c in cols)
            + " |" for r in found]
    return out


def _memory_section(result: AnalysisResult) -> list[str]:
    lines = memory_lines(result)
    if not lines:
        return []
    return ["**Device memory**", "", *(f"- {md_escape(line)}" for line in lines), ""]


def _code(text: Any) -> str:
    # Code spans show text literally (no HTML, no links); only backticks and newlines break them.
    return visible(" ".join(str(text).replace("`", "'").split())) or " "


def _short(name: Any, limit: int = 60) -> str:
    s = str(name)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def write_markdown(result: AnalysisResult, path: str | os.PathLike[str]) -> None:
    """Write the Markdown summary of ``result`` to ``path`` (atomically)."""
    write_text_atomic(path, render_markdown(result))
