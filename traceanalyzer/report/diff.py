"""Before/after comparison of two analyses: what changed, by how much, and which findings went.

:func:`diff_results` works on two :class:`AnalysisResult` objects of any formats. When both
traces have steps, kernel and category times are compared **per step**, so a trace of 5 steps and
one of 8 compare fairly; otherwise totals over each analyzed window are compared.

Renderers: :func:`render_terminal`, :func:`render_markdown`, :func:`render_html` and
:func:`to_json_dict` (schema in docs/json-schema.md).
"""

from __future__ import annotations

import html as _html
import json
import os
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import polars as pl

from traceanalyzer import __version__
from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.findings import Finding, severity_rank
from traceanalyzer.model import TraceMeta
from traceanalyzer.report._common import (
    finite,
    fmt_bytes,
    fmt_ns,
    fmt_pct,
    pct_of,
    short_kernel_name,
    terminal_safe,
    write_text_atomic,
)
from traceanalyzer.report.jsonout import SCHEMA_VERSION, clean, meta_dict
from traceanalyzer.report.markdown import md_escape
from traceanalyzer.report.terminal import table
from traceanalyzer.report.textsafe import visible

TOP_KERNELS = 25


#: A relative change is given only up to this (11x the base): past it the base is too small for
#: a percentage to mean anything ("+84257529.4%" on a kernel that took 1 µs before), and the
#: absolute change stands alone (docs/metrics.md, diff).
MAX_RELATIVE_PCT = 1000.0


@dataclass
class MetricDelta:
    name: str  # machine name, e.g. "step_time_mean_ns"
    label: str  # for people
    unit: str  # "ns", "pct", "count" or "bytes"
    before: float | None
    after: float | None
    #: Whether a smaller value is better (step time, idle) or a larger one (busy %); None: neutral.
    lower_is_better: bool | None = True

    @property
    def delta(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before

    @property
    def delta_pct(self) -> float | None:
        if self.delta is None or not self.before:
            return None
        rel = 100.0 * self.delta / abs(self.before)
        return rel if abs(rel) <= MAX_RELATIVE_PCT else None

    @property
    def verdict(self) -> str:
        """"better", "worse" or "" (no change, no data, or a neutral metric)."""
        d = self.delta
        if d is None or self.lower_is_better is None or abs(d) < 1e-9:
            return ""
        if self.unit == "pct" and abs(d) < 0.05:
            return ""
        return "better" if (d < 0) == self.lower_is_better else "worse"


@dataclass
class FindingDelta:
    slug: str
    rule_id: str
    severity: str
    title: str
    message: str
    before_impact_ns: int | None
    after_impact_ns: int | None


@dataclass
class DiffResult:
    before: TraceMeta
    after: TraceMeta
    metrics: list[MetricDelta]
    #: category, before_ns, after_ns, delta_ns, delta_pct, before_count, after_count
    categories: pl.DataFrame
    #: name, category, before_ns, after_ns, delta_ns, delta_pct, before_count, after_count;
    #: largest absolute change first.
    kernels: pl.DataFrame
    #: "per step" when both traces have steps (times are per step), else "total".
    basis: str
    resolved: list[FindingDelta] = field(default_factory=list)
    new: list[FindingDelta] = field(default_factory=list)
    unchanged: list[FindingDelta] = field(default_factory=list)
    #: What each side measured and why figures may not compare (diff_notes).
    notes: list[str] = field(default_factory=list)


def diff_notes(before: AnalysisResult, after: AnalysisResult) -> list[str]:
    """Say what each side measured: its profiler and window, when they differ the warning that
    the figures do not compare like with like, and how to read busy % against step time."""
    out = []
    for side, r in (("before", before), ("after", after)):
        what = r.meta.profiler or r.meta.source_format
        window = r.window.describe() if r.window is not None else "the whole trace"
        out.append(f"{side}: {what}; {window}")
    if before.meta.source_format != after.meta.source_format:
        out.append(f"the two traces come from different profilers ({before.meta.source_format} "
                   f"and {after.meta.source_format}): each slows the CPU side differently, so "
                   "step times and idle shares are not measured alike")
    wb = before.window.kind if before.window is not None else "all"
    wa = after.window.kind if after.window is not None else "all"
    if wb != wa:
        out.append(f"the windows differ ({wb} and {wa}): compare with the same --window")
    mb, ma = before.metrics, after.metrics
    if (mb.step_time_mean_ns and ma.step_time_mean_ns and ma.step_time_mean_ns < mb.step_time_mean_ns
            and ma.busy_pct < mb.busy_pct):
        out.append("GPU busy fell while the step got faster: the GPU work per step shrank more "
                   "than the step, which is now bound by something else (often the CPU); busy % "
                   "is a share of the GPU's active span on each side, not a goal in itself")
    out.append("step times are as profiled (a profiler slows the CPU side); a program's own "
               "CUDA-event timing without a profiler can differ")
    return out


def _metric_rows(b: AnalysisResult, a: AnalysisResult) -> list[MetricDelta]:
    mb, ma = b.metrics, a.metrics

    def share(m: Any, attr: str) -> float | None:
        return pct_of(getattr(m, attr), m.span_ns)

    rows = [
        MetricDelta("step_time_mean_ns", "Step time (mean)", "ns", mb.step_time_mean_ns,
                    ma.step_time_mean_ns),
        MetricDelta("step_time_p50_ns", "Step time (p50)", "ns", mb.step_time_p50_ns,
                    ma.step_time_p50_ns),
        MetricDelta("step_time_p95_ns", "Step time (p95)", "ns", mb.step_time_p95_ns,
                    ma.step_time_p95_ns),
        MetricDelta("span_ns", "GPU's active span", "ns", mb.span_ns, ma.span_ns, None),
        MetricDelta("busy_pct", "GPU busy", "pct", mb.busy_pct, ma.busy_pct, False),
        MetricDelta("idle_pct", "GPU idle", "pct", share(mb, "idle_ns"), share(ma, "idle_ns")),
        MetricDelta("idle_host_wait_pct", "  idle: host wait", "pct",
                    share(mb, "idle_host_wait_ns"), share(ma, "idle_host_wait_ns")),
        MetricDelta("idle_kernel_wait_pct", "  idle: kernel wait", "pct",
                    share(mb, "idle_kernel_wait_ns"), share(ma, "idle_kernel_wait_ns")),
        MetricDelta("idle_other_pct", "  idle: other", "pct", share(mb, "idle_other_ns"),
                    share(ma, "idle_other_ns")),
        MetricDelta("compute_pct", "Compute", "pct", share(mb, "compute_ns"),
                    share(ma, "compute_ns"), None),
        MetricDelta("communication_pct", "Communication", "pct", share(mb, "communication_ns"),
                    share(ma, "communication_ns"), None),
        MetricDelta("exposed_communication_pct", "  exposed communication", "pct",
                    share(mb, "exposed_communication_ns"), share(ma, "exposed_communication_ns")),
        MetricDelta("memory_pct", "Memcpy / memset", "pct", share(mb, "memory_ns"),
                    share(ma, "memory_ns")),
        MetricDelta("kernels_per_step", "Kernels per step", "count", mb.kernels_per_step,
                    ma.kernels_per_step),
        MetricDelta("kernel_count", "Kernels", "count", mb.kernel_count, ma.kernel_count, None),
        MetricDelta("launch_overhead_pct", "Launch API time (CPU)", "pct",
                    mb.launch_overhead_pct, ma.launch_overhead_pct),
        MetricDelta("launch_delay_p50_ns", "Launch→start delay (p50)", "ns",
                    mb.launch_delay_p50_ns, ma.launch_delay_p50_ns),
    ]
    rows += _memory_rows(mb, ma)
    faster = bool(mb.step_time_mean_ns and ma.step_time_mean_ns
                  and ma.step_time_mean_ns < mb.step_time_mean_ns and ma.busy_pct < mb.busy_pct)
    for r in rows:
        r.before, r.after = finite(r.before), finite(r.after)
        # A faster step that leaves the GPU busy a smaller share of it: no verdict on busy.
        if faster and r.name in ("busy_pct", "idle_pct", "idle_host_wait_pct"):
            r.lower_is_better = None
    return rows


def _memory_rows(mb: Any, ma: Any) -> list[MetricDelta]:
    """The peaks of device memory, where either trace records memory events."""
    rows = [MetricDelta(name, label, "bytes", getattr(mb, name), getattr(ma, name))
            for name, label in (("peak_memory_allocated_bytes", "Peak memory allocated"),
                                ("peak_memory_reserved_bytes", "Peak memory reserved"))]
    return [r for r in rows if r.before is not None or r.after is not None]


def _per(result: AnalysisResult, per_step: bool) -> float:
    return float(result.metrics.step_count) if per_step and result.metrics.step_count else 1.0


def _compare(before: pl.DataFrame, after: pl.DataFrame, key: list[str], count_col: str,
             div_b: float, div_a: float) -> pl.DataFrame:
    def prep(frame: pl.DataFrame, side: str, div: float) -> pl.DataFrame:
        if frame is None or frame.is_empty():
            return pl.DataFrame(schema={**{k: pl.String for k in key}, f"{side}_ns": pl.Float64,
                                        f"{side}_count": pl.Int64})
        return frame.select(
            *[pl.col(k).cast(pl.String) for k in key],
            (pl.col("total_ns").cast(pl.Float64) / div).alias(f"{side}_ns"),
            pl.col(count_col).cast(pl.Int64).alias(f"{side}_count"),
        ).group_by(key).agg(pl.col(f"{side}_ns").sum(), pl.col(f"{side}_count").sum())

    joined = prep(before, "before", div_b).join(prep(after, "after", div_a), on=key, how="full",
                                                coalesce=True)
    return (
        joined.with_columns(pl.col("before_ns", "after_ns").fill_null(0.0),
                            pl.col("before_count", "after_count").fill_null(0))
        .with_columns(delta_ns=pl.col("after_ns") - pl.col("before_ns"))
        .with_columns(delta_pct=pl.when(pl.col("before_ns") > 0)
                      .then(100.0 * pl.col("delta_ns") / pl.col("before_ns")))
        .with_columns(delta_pct=pl.when(pl.col("delta_pct").abs() <= MAX_RELATIVE_PCT)
                      .then("delta_pct"))
        .sort([pl.col("delta_ns").abs(), *key], descending=[True] + [False] * len(key))
    )


def _by_slug(findings: list[Finding]) -> dict[str, FindingDelta]:
    out: dict[str, FindingDelta] = {}
    for f in sorted(findings, key=lambda f: -int(f.impact_ns or 0)):
        cur = out.get(f.slug)
        if cur is None:
            out[f.slug] = FindingDelta(f.slug, f.rule_id, f.severity, f.title, f.message,
                                       int(f.impact_ns or 0), None)
        else:  # several ranks: one entry per rule, impacts summed, worst severity kept
            cur.before_impact_ns = (cur.before_impact_ns or 0) + int(f.impact_ns or 0)
            if _sev(f.severity) > _sev(cur.severity):
                cur.severity = f.severity
    return out


def _sev(s: str) -> int:
    try:
        return severity_rank(s)
    except ValueError:
        return -1


def diff_results(before: AnalysisResult, after: AnalysisResult) -> DiffResult:
    """Compare two analyses (``before`` is the baseline)."""
    per_step = bool(before.metrics.step_count and after.metrics.step_count)
    div_b, div_a = _per(before, per_step), _per(after, per_step)
    kernels = _compare(before.kernels, after.kernels, ["name", "category"], "instances",
                       div_b, div_a)
    categories = _compare(before.categories, after.categories, ["category"], "count",
                          div_b, div_a)
    fb, fa = _by_slug(before.findings), _by_slug(after.findings)
    resolved, new, unchanged = [], [], []
    for slug in sorted(set(fb) | set(fa)):
        if slug in fb and slug in fa:
            d = fa[slug]
            d.after_impact_ns, d.before_impact_ns = d.before_impact_ns, fb[slug].before_impact_ns
            unchanged.append(d)
        elif slug in fb:
            resolved.append(fb[slug])
        else:
            d = fa[slug]
            d.after_impact_ns, d.before_impact_ns = d.before_impact_ns, None
            new.append(d)
    key = lambda d: (-max(d.before_impact_ns or 0, d.after_impact_ns or 0), d.slug)  # noqa: E731
    return DiffResult(
        before=before.meta, after=after.meta, metrics=_metric_rows(before, after),
        categories=categories, kernels=kernels, basis="per step" if per_step else "total",
        resolved=sorted(resolved, key=key), new=sorted(new, key=key),
        unchanged=sorted(unchanged, key=key), notes=diff_notes(before, after),
    )


# -- formatting helpers -------------------------------------------------------------------------


def _val(unit: str, v: float | None) -> str:
    if v is None:
        return "–"
    if unit == "ns":
        return fmt_ns(v)
    if unit == "pct":
        return fmt_pct(v)
    if unit == "bytes":
        return fmt_bytes(v)
    return f"{v:,.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:,.1f}"


def _delta(unit: str, d: float | None, pct: float | None) -> str:
    if d is None:
        return "–"
    sign = "+" if d > 0 else ("−" if d < 0 else "±")
    if unit == "pct":
        return f"{sign}{abs(d):.1f} pts"
    body = fmt_ns(abs(d)) if unit == "ns" else _val("bytes" if unit == "bytes" else "count", abs(d))
    rel = f" ({'+' if pct > 0 else '−'}{abs(pct):.1f}%)" if pct is not None and pct != 0 else ""
    return f"{sign}{body}{rel}"


def _fdelta(d: FindingDelta) -> str:
    b, a = d.before_impact_ns, d.after_impact_ns
    if b is not None and a is not None:
        return f"{fmt_ns(b)} → {fmt_ns(a)}"
    return fmt_ns(a if a is not None else b)


# -- terminal -----------------------------------------------------------------------------------


def render_terminal(diff: DiffResult, top: int = 10) -> str:
    lines = [f"before: {terminal_safe(diff.before.path)}",
             f"after:  {terminal_safe(diff.after.path)}"]
    lines += [f"  note: {terminal_safe(n)}" for n in diff.notes]
    lines.append("")
    rows = [[m.label, _val(m.unit, m.before), _val(m.unit, m.after),
             _delta(m.unit, m.delta, m.delta_pct), m.verdict] for m in diff.metrics
            if m.before is not None or m.after is not None]
    lines.append(table(rows, ["metric", "before", "after", "delta", ""], right={1, 2, 3}))
    unit = "per step" if diff.basis == "per step" else "total"
    if not diff.categories.is_empty():
        crow = [[terminal_safe(r["category"]), fmt_ns(r["before_ns"]), fmt_ns(r["after_ns"]),
                 _delta("ns", r["delta_ns"], r["delta_pct"])]
                for r in diff.categories.iter_rows(named=True)]
        lines += ["", f"GPU time by category ({unit}):",
                  table(crow, ["category", "before", "after", "delta"], right={1, 2, 3})]
    if not diff.kernels.is_empty():
        krow = [[terminal_safe(short_kernel_name(r["name"], 60)), terminal_safe(r["category"]),
                 fmt_ns(r["before_ns"]), fmt_ns(r["after_ns"]),
                 _delta("ns", r["delta_ns"], r["delta_pct"])]
                for r in diff.kernels.head(top).iter_rows(named=True)]
        lines += ["", f"Kernels with the largest change ({unit}):",
                  table(krow, ["kernel", "category", "before", "after", "delta"],
                        right={2, 3, 4})]
    lines.append("")
    for title, items in (("Resolved", diff.resolved), ("New", diff.new),
                         ("Unchanged", diff.unchanged)):
        lines.append(f"{title} findings ({len(items)}):")
        for d in items:
            lines.append(f"  [{d.severity}] {terminal_safe(d.slug)}: {_fdelta(d)}")
    return visible("\n".join(lines), keep_newlines=True)  # and whatever a field missed


# -- JSON ---------------------------------------------------------------------------------------


def to_json_dict(diff: DiffResult) -> dict[str, Any]:
    def fd(d: FindingDelta) -> dict[str, Any]:
        return {"slug": d.slug, "id": d.rule_id, "severity": d.severity, "title": d.title,
                "message": d.message, "before_impact_ns": d.before_impact_ns,
                "after_impact_ns": d.after_impact_ns}

    def rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
        return [{k: clean(v) for k, v in r.items()} for r in frame.iter_rows(named=True)]

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "diff",
        "tool": {"name": "traceanalyzer", "version": __version__},
        "before": meta_dict(diff.before),
        "after": meta_dict(diff.after),
        "basis": diff.basis,
        "notes": list(diff.notes),
        "metrics": [{"name": m.name, "before": clean(m.before), "after": clean(m.after),
                     "delta": clean(m.delta), "delta_pct": clean(m.delta_pct),
                     "verdict": m.verdict} for m in diff.metrics],
        "categories": rows(diff.categories),
        "kernels": rows(diff.kernels),
        "findings": {"resolved": [fd(d) for d in diff.resolved], "new": [fd(d) for d in diff.new],
                     "unchanged": [fd(d) for d in diff.unchanged]},
    }


def write_json(diff: DiffResult, path: str | os.PathLike[str]) -> None:
    from traceanalyzer.report.textsafe import json_text_safe

    write_text_atomic(path, json_text_safe(json.dumps(to_json_dict(diff), indent=2,
                                                      ensure_ascii=False, allow_nan=False)) + "\n")


# -- Markdown -----------------------------------------------------------------------------------


def render_markdown(diff: DiffResult, top: int = 10) -> str:
    b = PurePath(diff.before.path).name
    a = PurePath(diff.after.path).name
    lines = [f"### traceanalyzer diff: {md_escape(b)} → {md_escape(a)}", ""]
    lines += [f"- {md_escape(n)}" for n in diff.notes]
    lines += ["", "| Metric | Before | After | Delta |", "|---|---:|---:|---:|"]
    marks = {"better": " ✅", "worse": " ❌", "": ""}
    for m in diff.metrics:
        if m.before is None and m.after is None:
            continue
        lines.append(f"| {m.label.strip()} | {_val(m.unit, m.before)} | {_val(m.unit, m.after)} "
                     f"| {_delta(m.unit, m.delta, m.delta_pct)}{marks[m.verdict]} |")
    if not diff.kernels.is_empty():
        unit = "per step" if diff.basis == "per step" else "total"
        lines += ["", f"**Largest kernel changes** ({unit})", "",
                  "| Kernel | Category | Before | After | Delta |", "|---|---|---:|---:|---:|"]
        for r in diff.kernels.head(top).iter_rows(named=True):
            lines.append(f"| {md_escape(short_kernel_name(r['name'], 70))} | "
                         f"{md_escape(r['category'])} | {fmt_ns(r['before_ns'])} | "
                         f"{fmt_ns(r['after_ns'])} | {_delta('ns', r['delta_ns'], r['delta_pct'])} |")
    lines.append("")
    for title, items in (("Resolved", diff.resolved), ("New", diff.new),
                         ("Unchanged", diff.unchanged)):
        lines.append(f"**{title} findings ({len(items)})**" + (":" if items else ""))
        lines += [f"- `{d.rule_id.replace('`', '')}` {md_escape(d.slug)} "
                  f"({md_escape(d.severity)}): {_fdelta(d)}" for d in items]
        lines.append("")
    return "\n".join(lines)


def write_markdown(diff: DiffResult, path: str | os.PathLike[str], top: int = 10) -> None:
    write_text_atomic(path, render_markdown(diff, top=top))


# -- HTML ---------------------------------------------------------------------------------------


def _e(x: Any) -> str:
    return _html.escape(str(x), quote=True)


def render_html(diff: DiffResult, top: int = TOP_KERNELS) -> str:
    from traceanalyzer.report.html import CSS

    b, a = diff.before, diff.after
    unit = "per step" if diff.basis == "per step" else "total"
    out = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>traceanalyzer diff: {_e(PurePath(b.path).name)} → {_e(PurePath(a.path).name)}"
        f"</title><style>{CSS}.better{{color:var(--st-busy);font-weight:600}}"
        ".worse{color:var(--sev-high);font-weight:600}svg .grid{stroke:var(--muted)}td.slug{white-space:nowrap}</style></head><body>",
        '<header id="summary"><div class="muted">traceanalyzer diff</div>'
        f"<h1>{_e(PurePath(b.path).name)} → {_e(PurePath(a.path).name)}</h1>"
        f'<dl class="meta"><dt>Before</dt><dd class="mono break">{_e(b.path)} '
        f"({_e(b.source_format)})</dd><dt>After</dt><dd class=\"mono break\">{_e(a.path)} "
        f"({_e(a.source_format)})</dd><dt>Kernel times</dt><dd>{_e(unit)}</dd></dl>"
        + "".join(f'<p class="muted">{_e(n)}</p>' for n in diff.notes) + "</header>",
        '<section id="metrics"><h2>Headline</h2><table><thead><tr><th>Metric</th>'
        '<th class="num">Before</th><th class="num">After</th><th class="num">Delta</th>'
        "<th></th></tr></thead><tbody>",
    ]
    for m in diff.metrics:
        if m.before is None and m.after is None:
            continue
        out.append(f"<tr><td>{_e(m.label.strip())}</td><td class=\"num\">{_e(_val(m.unit, m.before))}"
                   f"</td><td class=\"num\">{_e(_val(m.unit, m.after))}</td><td class=\"num "
                   f"{m.verdict}\">{_e(_delta(m.unit, m.delta, m.delta_pct))}</td>"
                   f"<td class=\"{m.verdict}\">{_e(m.verdict)}</td></tr>")
    out.append("</tbody></table></section>")
    out.append('<section id="findings"><h2>Findings</h2>')
    for title, items, cls in (("Resolved", diff.resolved, "better"), ("New", diff.new, "worse"),
                              ("Unchanged", diff.unchanged, "")):
        out.append(f'<h3 class="{cls}">{title} ({len(items)})</h3>')
        if items:
            out.append("<table><thead><tr><th>Id</th><th>Rule</th><th>Severity</th>"
                       '<th class="num">Impact (before → after)</th><th>Message</th></tr></thead>'
                       "<tbody>")
            for d in items:
                out.append(f"<tr><td><code>{_e(d.rule_id)}</code></td><td class=\"slug\">{_e(d.slug)}</td>"
                           f"<td>{_e(d.severity)}</td><td class=\"num\">{_e(_fdelta(d))}</td>"
                           f"<td>{_e(d.message)}</td></tr>")
            out.append("</tbody></table>")
    out.append("</section>")
    for sec, title, frame, cols in (
        ("categories", f"GPU time by category ({unit})", diff.categories, ["category"]),
        ("kernels", f"Kernels with the largest change ({unit})", diff.kernels.head(top),
         ["name", "category"]),
    ):
        out.append(f'<section id="{sec}"><h2>{_e(title)}</h2>')
        if frame.is_empty():
            out.append('<p class="muted">None.</p></section>')
            continue
        head = "".join(f"<th>{_e(c.capitalize())}</th>" for c in cols)
        out.append(f"<table><thead><tr>{head}<th class=\"num\">Before</th><th class=\"num\">After"
                   "</th><th class=\"num\">Delta</th><th></th><th class=\"num\">Count before → after</th>"
                   "</tr></thead><tbody>")
        biggest = max((abs(x) for x in frame["delta_ns"].to_list()), default=0) or 1
        for r in frame.iter_rows(named=True):
            cells = "".join(
                f'<td class="name" title="{_e(r[c])}">{_e(short_kernel_name(r[c], 110))}</td>'
                if c == "name" else f"<td>{_e(r[c])}</td>" for c in cols)
            cls = "better" if r["delta_ns"] < 0 else ("worse" if r["delta_ns"] > 0 else "")
            out.append(f"<tr>{cells}<td class=\"num\">{_e(fmt_ns(r['before_ns']))}</td>"
                       f"<td class=\"num\">{_e(fmt_ns(r['after_ns']))}</td><td class=\"num {cls}\">"
                       f"{_e(_delta('ns', r['delta_ns'], r['delta_pct']))}</td>"
                       f"<td>{_bar(r['delta_ns'], biggest)}</td><td class=\"num\">"
                       f"{r['before_count']:,} → {r['after_count']:,}</td></tr>")
        out.append("</tbody></table></section>")
    out.append(f"<footer>Made by traceanalyzer {_e(__version__)}.</footer></body></html>\n")
    return "".join(out)


def _bar(delta: float, biggest: float) -> str:
    """A diverging bar: left and green for time saved, right and orange for time added."""
    half = 60 * min(abs(delta) / biggest, 1.0)
    x = 60 - half if delta < 0 else 60
    cls = "st-busy" if delta < 0 else "st-host"
    return (f'<svg width="120" height="10" viewBox="0 0 120 10" aria-hidden="true">'
            f'<line x1="60" x2="60" y1="0" y2="10" class="grid"/>'
            f'<rect class="{cls}" x="{x:.1f}" y="1" width="{max(half, 0.5):.1f}" height="8"/></svg>')


def write_html(diff: DiffResult, path: str | os.PathLike[str]) -> None:
    write_text_atomic(path, render_html(diff))
