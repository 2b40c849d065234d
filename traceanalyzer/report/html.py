"""``--html``: a self-contained, single-file report for people.

One file with inline CSS, SVG and one inline script; it fetches nothing, so it opens from disk or
an e-mail attachment. It stays small for any trace: tables show the top rows, charts are
aggregated, and the timeline embeds a few capped windows (see :mod:`.timeline`).

Safety: every string that comes from a trace goes through :func:`esc` (HTML-escaped, quotes
included). The timeline's data travels as a JSON block whose ``<``, ``>``, ``&`` and U+2028/9 are
\\u-escaped, so no string can close the block. A Content-Security-Policy allows only the one
script of the report (by hash) and no network at all, so even a missed escape could not run or
load anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path, PurePath
from typing import Any

import polars as pl

from traceanalyzer import __version__
from traceanalyzer.analysis.memory import headline as memory_headline
from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.analysis.window import OUTLIER_FACTOR
from traceanalyzer.findings import SHARE_BASE, Finding
from traceanalyzer.model import Trace
from traceanalyzer.report import charts
from traceanalyzer.report._common import (
    EXPOSED_TRANSFER_LABEL,
    INFORMATIONAL,
    costs_nothing,
    counted,
    exposed_transfer,
    finite,
    fmt_bytes,
    fmt_ns,
    fmt_pct,
    header_notes,
    impact_text,
    pct_of,
    safe_url,
    short_kernel_name,
    sorted_findings,
    step_numbering,
    step_rows,
    write_text_atomic,
)
from traceanalyzer.report.charts import cat_class, esc
from traceanalyzer.report.critical import section as critical_section
from traceanalyzer.report.perf import roofline_section
from traceanalyzer.report.timeline import timeline_data

_ASSETS = Path(__file__).parent / "assets"
CSS = (_ASSETS / "report.css").read_text(encoding="utf-8")
JS = (_ASSETS / "report.js").read_text(encoding="utf-8")
_JS_HASH = base64.b64encode(hashlib.sha256(JS.encode("utf-8")).digest()).decode("ascii")
CSP = (f"default-src 'none'; script-src 'sha256-{_JS_HASH}'; style-src 'unsafe-inline'; "
       "img-src data:; base-uri 'none'; form-action 'none'")

TOP_KERNELS = 50
TOP_OPERATORS = 30
MAX_EVIDENCE_ROWS = 20
MAX_EVIDENCE_COLS = 10
MAX_WARNINGS = 50
#: Where a rule's full documentation lives (repository-relative).
RULES_DOC = "docs/rules.md"


# In the JSON text of the embedded data: an escaped backslash (kept), a C0 control as JSON
# escapes it (\u001b, \r, \b, \f), or a character JSON leaves raw that a page should not act
# on (DEL, C1, bidi controls, lone surrogates). U+2028/2029 are kept, as JSON escapes.
_SCRIPT_JSON_TOKEN = re.compile(
    r"(\\\\)|\\u00([01][0-9a-fA-F])|\\([rbf])"
    "|([\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff])"
)
_SHORT_ESCAPES = {"r": "0d", "b": "08", "f": "0c"}


def _visible_in_json(m: re.Match[str]) -> str:
    if m.group(1):
        return m.group(1)
    if m.group(2):
        return "\\\\x" + m.group(2).lower()
    if m.group(3):
        return "\\\\x" + _SHORT_ESCAPES[m.group(3)]
    code = ord(m.group(4))
    return f"\\\\x{code:02x}" if code < 0x100 else f"\\\\u{code:04x}"


def json_for_script(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: nothing can close it
    (``<``, ``>``, ``&`` as ``\\u003c`` ..., so no ``</script`` or ``<!--``), and the strings it
    parses to show control characters, bidi controls and lone surrogates as visible escapes
    (``\\x1b``, ``\\u202e``), as the page's markup does (:func:`esc`). Tabs, newlines and
    U+2028/2029 are kept (the last two as ``\\u2028`` escapes: old JavaScript ends a line there)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = _SCRIPT_JSON_TOKEN.sub(_visible_in_json, text)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def render_html(result: AnalysisResult, trace: Trace | None = None, *,
                timeline: dict[str, Any] | None = None) -> str:
    """The report as one HTML string. Pass ``trace`` to draw the per-stream GPU timeline, or
    ``timeline``, the ``timeline_data`` payload computed before (the result cache keeps it)."""
    findings = sorted_findings(result.findings)
    tl = timeline if timeline is not None else timeline_data(result, trace)
    name = PurePath(result.meta.path).name or result.meta.path
    body = [
        _header(result, name),
        _nav(),
        _headline(result),
        _findings(findings, result.notes(), tl is not None, result.metrics.window_start_ns),
        critical_section(result),
        _timeline(tl),
        _charts(result),
        _memory(result),
        roofline_section(result),
        _tables(result),
        _rules(result),
        _warnings(result),
        _footer(),
    ]
    data = json_for_script(tl) if tl is not None else "null"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>traceanalyzer: {esc(name)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + f'\n<script type="application/json" id="ta-data">{data}</script>\n'
        + f"<script>{JS}</script>\n</body></html>\n"
    )


def write_html(result: AnalysisResult, path: str | os.PathLike[str],
               trace: Trace | None = None, *, timeline: dict[str, Any] | None = None) -> None:
    """Write the HTML report of ``result`` to ``path`` (atomically)."""
    write_text_atomic(path, render_html(result, trace, timeline=timeline))


# -- sections -----------------------------------------------------------------------------------


def _header(result: AnalysisResult, name: str) -> str:
    meta, m = result.meta, result.metrics
    # Identical GPUs (the usual 8x node) are listed once, with their ids.
    groups: dict[str, list[int]] = {}
    for d in sorted(meta.devices, key=lambda d: d.id):
        bits = [d.name or "unknown GPU"]
        if d.sm_count:
            bits.append(f"{d.sm_count} SMs")
        if d.memory_bytes:
            bits.append(f"{d.memory_bytes / 2**30:.0f} GiB")
        if d.compute_capability:
            bits.append(f"sm_{d.compute_capability.replace('.', '')}")
        groups.setdefault(", ".join(bits), []).append(d.id)
    devices = [
        (f"{len(ids)} × {desc} (GPUs {_id_ranges(ids)})" if len(ids) > 1
         else f"GPU {ids[0]}: {desc}")
        for desc, ids in groups.items()
    ]
    # The facts every report opens with (report._common.header_notes); the window's row adds
    # the GPU span's trace times, for finding the span in another tool.
    notes, said = [], header_notes(result)
    for note in said:
        text = note.text
        if note.label == "window" and m.window_start_ns is not None and m.window_end_ns is not None:
            text += (f" GPU span {fmt_ns(m.span_ns)} (trace time {m.window_start_ns:,} → "
                     f"{m.window_end_ns:,} ns).")
        notes.append(("GPUs used" if note.label == "device" else note.title, esc(text)))
    at = 1 if any(note.label == "device" for note in said) else 0  # the window's row, then the steps' (always shown here)
    if result.window is None:
        notes.insert(at, ("Window", "–"))
    if not m.step_count:
        notes.insert(at + 1, ("Steps", esc(step_numbering(result))))
    rows = [
        ("File", f'<span class="mono break">{esc(meta.path)}</span>'),
        ("Format", esc(meta.source_format) + (f" · {esc(meta.profiler)}" if meta.profiler else "")),
        ("Devices", "<br>".join(esc(d) for d in devices) or "not recorded"),
        ("Rank", f"{meta.rank} of world size {meta.world_size}"),
        *notes,
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    extra = ""
    if meta.extra:
        # Format-specific facts (versions, distributed info): short values only.
        items = [(str(k), json.dumps(v, ensure_ascii=False, default=str) if not isinstance(v, str) else v)
                 for k, v in sorted(meta.extra.items(), key=lambda kv: str(kv[0]))]
        items = [(k, v if len(v) <= 160 else v[:159] + "…") for k, v in items[:40]]
        extra = ("<details><summary>More about the trace</summary><dl class=\"meta\">"
                 + "".join(f'<dt>{esc(k)}</dt><dd class="mono break">{esc(v)}</dd>'
                           for k, v in items) + "</dl></details>")
    return (f'<header id="summary"><div class="muted">traceanalyzer report</div>'
            f"<h1>{esc(name)}</h1><dl class=\"meta\">{dl}</dl>{extra}</header>")


def _id_ranges(ids: list[int]) -> str:
    """[0, 1, 2, 3, 5] -> "0–3, 5"."""
    out: list[str] = []
    start = prev = ids[0]
    for i in [*ids[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(f"{start}–{prev}" if prev > start else f"{start}")
        if i is not None:
            start = prev = i
    return ", ".join(out)


def _nav() -> str:
    links = [("headline", "Headline"), ("findings", "Findings"),
             ("critical-path", "Critical path"), ("timeline", "Timeline"),
             ("charts", "Charts"), ("memory", "Memory"), ("roofline", "Roofline"),
             ("kernels", "Kernels"), ("operators", "Operators"),
             ("rules", "Rules"), ("warnings", "Warnings")]
    return "<nav>" + "".join(f'<a href="#{a}">{t}</a>' for a, t in links) + "</nav>"


def _mfu_card(result: AnalysisResult) -> str:
    """MFU, with the achieved TFLOP/s and the peak it is against (docs/perf-model.md)."""
    from traceanalyzer.perfmodel import metrics_of

    m = metrics_of(result)
    if m["mfu_pct"] is None:
        return _card("MFU", "–", m["mfu_reason"] or "")
    sub = f"{m['achieved_tflops']:.0f} TFLOP/s of {m['peak_tflops']:g} ({m['peak_name']})"
    if m["tokens_per_s"] is not None:
        sub += f" · {m['tokens_per_s']:,.0f} tokens/s"
    return _card("MFU", fmt_pct(m["mfu_pct"]), sub)


def _card(label: str, value: str, sub: str = "") -> str:
    return (f'<div class="card"><div class="k">{esc(label)}</div><div class="v">{esc(value)}</div>'
            f'<div class="s">{esc(sub)}</div></div>')


def _headline(result: AnalysisResult) -> str:
    m = result.metrics
    span = m.span_ns

    def p(x: Any) -> str:
        return fmt_pct(pct_of(x, span))

    cards = [
        _card("Step time (mean)", fmt_ns(m.step_time_mean_ns) if m.step_count else "no steps",
              f"p50 {fmt_ns(m.step_time_p50_ns)} · p95 {fmt_ns(m.step_time_p95_ns)}"
              if m.step_count else ""),
        _card("GPU busy", fmt_pct(m.busy_pct), f"of {fmt_ns(span)}, {SHARE_BASE}"
              + (f" · {result.gpus_note}" if result.gpus_note else "")),
        _card("GPU idle", p(m.idle_ns),
              f"host wait {p(m.idle_host_wait_ns)} · kernel wait {p(m.idle_kernel_wait_ns)} · "
              f"other {p(m.idle_other_ns)}"),
        _card("Compute", p(m.compute_ns), counted(m.kernel_count, "kernel")),
        _card("Communication", p(m.communication_ns),
              f"exposed {p(m.exposed_communication_ns)}"
              + (f" · {EXPOSED_TRANSFER_LABEL} {p(transfer)}"
                 if (transfer := exposed_transfer(m)) is not None else "")
              + f" · overlap {fmt_pct(m.comm_overlap_pct)}"),
        _card("Memcpy / memset", p(m.memory_ns),
              f"{m.memcpy_count:,} copies · {m.memset_count:,} sets"),
        _card("Kernels per step",
              "–" if m.kernels_per_step is None else f"{m.kernels_per_step:,.0f}",
              counted(m.step_count, "step")),
        _card("Launch API time (CPU)", fmt_pct(m.launch_overhead_pct),
              f"launch→start p50 {fmt_ns(m.launch_delay_p50_ns)} · p95 "
              f"{fmt_ns(m.launch_delay_p95_ns)}"),
        _mfu_card(result),
    ]
    return f'<section id="headline"><h2>Headline</h2><div class="cards">{"".join(cards)}</div></section>'


def _evidence_table(rows: list[dict[str, Any]], origin: int | None = None) -> str:
    if not rows:
        return ""
    cols: list[str] = []
    for r in rows[:MAX_EVIDENCE_ROWS]:
        for k in r:
            if k not in cols:
                cols.append(k)
    cols = cols[:MAX_EVIDENCE_COLS]
    head = "".join(f'<th class="{_num_class(k, rows)}">{esc(k)}</th>' for k in cols)
    body = []
    for r in rows[:MAX_EVIDENCE_ROWS]:
        cells = "".join(_evidence_cell(k, r.get(k), origin) for k in cols)
        body.append(f"<tr>{cells}</tr>")
    more = (f'<p class="muted">{len(rows) - MAX_EVIDENCE_ROWS} more rows in the JSON '
            "report.</p>" if len(rows) > MAX_EVIDENCE_ROWS else "")
    return (f"<details><summary>Evidence ({len(rows)} rows)</summary><table><thead><tr>{head}"
            f"</tr></thead><tbody>{''.join(body)}</tbody></table>{more}</details>")


def _num_class(key: str, rows: list[dict[str, Any]]) -> str:
    v = rows[0].get(key)
    return "num" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def _evidence_cell(key: str, value: Any, origin: int | None = None) -> str:
    if isinstance(value, bool) or value is None:
        return f"<td>{esc('' if value is None else value)}</td>"
    if key in ("start_ns", "end_ns") and isinstance(value, int) and origin is not None:
        # Trace clocks are huge absolute numbers; show the offset into the window instead.
        return (f'<td class="num" title="{value} ns on the trace clock">'
                f"+{esc(fmt_ns(value - origin))}</td>")
    if isinstance(value, (int, float)):
        scale = {"_ns": 1, "_us": 1e3, "_ms": 1e6}.get(key[-3:])
        if scale and key not in ("start_ns", "end_ns"):
            return f'<td class="num">{esc(fmt_ns(value * scale))}</td>'
        if key.endswith("_pct"):
            return f'<td class="num">{esc(fmt_pct(value))}</td>'
        text = f"{value:,}" if isinstance(value, int) else f"{value:,.3f}"
        return f'<td class="num">{esc(text)}</td>'
    return f'<td class="name">{esc(value)}</td>'


def _findings(findings: list[Finding], notes: list[str], has_timeline: bool,
              origin: int | None) -> str:
    if not findings:
        return ('<section id="findings"><h2>Findings</h2><p>No rule fired on this trace. See '
                '<a href="#rules">rules</a> for what was checked.</p></section>')
    out = [f'<section id="findings"><h2>Findings ({len(findings)}, most costly first)</h2>']
    out += [f'<p class="muted">{esc(note)}</p>' for note in notes]
    for i, f in enumerate(findings):
        sev = f.severity if f.severity in ("critical", "high", "medium", "low", "info") else "info"
        impact = f"costs {impact_text(f)}"
        if costs_nothing(f):
            impact = INFORMATIONAL
        elif f.impact_per_step_ns is not None:
            impact += f", {fmt_ns(f.impact_per_step_ns)} per step"
        refs = [u for u in (safe_url(r) for r in f.references) if u]
        links = [f'<a href="#rule-{esc(_anchor(f.slug))}">Rule {esc(f.rule_id)} docs</a>']
        if has_timeline and any("start_ns" in r for r in f.evidence):
            links.append(f'<a class="tl-link" href="#timeline" data-finding="{i}">'
                         "Show on timeline</a>")
        links += [f'<a href="{esc(u)}" rel="noreferrer noopener">{esc(_host(u))}</a>'
                  for u in refs]
        rank = f" · rank {f.rank}" if f.rank is not None else ""
        out.append(
            f'<article class="finding sev-{sev}" id="finding-{i}">'
            f'<h3><span class="badge sev-{sev}">{esc(f.severity)}</span> '
            f'<code>{esc(f.rule_id)}</code> {esc(f.title)}</h3>'
            f"<div>{esc(f.message)}</div>"
            f'<div class="impact">{esc(impact)}{esc(rank)}</div>'
            f'<div class="fix"><b>Fix:</b> {esc(f.fix)}</div>'
            f"{_evidence_table(f.evidence, origin)}"
            f'<div class="links">{"".join(links)}</div></article>')
    out.append("</section>")
    return "".join(out)


def _anchor(slug: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in str(slug))


def _host(url: str) -> str:
    """Short link text: the host and the last part of the path (two links to one site differ)."""
    rest = url.split("://", 1)[-1].split("#", 1)[0].split("?", 1)[0].rstrip("/")
    host, _, path = rest.partition("/")
    last = path.rsplit("/", 1)[-1]
    text = f"{host}/…/{last}" if "/" in path else (f"{host}/{last}" if last else host)
    return text if len(text) <= 48 else text[:47] + "…"


def _timeline(tl: dict[str, Any] | None) -> str:
    if tl is None:
        return ('<section id="timeline"><h2>GPU timeline</h2><p class="muted">No timeline: the '
                "report was made without the trace's GPU activity (the <code>analyze</code> "
                "command draws it).</p></section>")
    legend = "".join(f'<span class="key {cat_class(c)}"></span>{esc(c)}' for c in tl["categories"])
    return (
        '<section id="timeline"><h2>GPU timeline</h2>'
        '<p class="muted">Per-stream GPU activity. Shaded: no stream shown is busy. Orange marks: '
        "where findings occur (their stream's lane is outlined).</p>"
        '<div class="tl-controls" id="tl-controls" hidden><label>Window <select id="tl-window">'
        '</select></label><button type="button" id="tl-in">Zoom in</button>'
        '<button type="button" id="tl-out">Zoom out</button>'
        '<button type="button" id="tl-reset">Reset</button></div>'
        '<div id="tl-wrap" hidden><canvas id="tl-canvas" height="120"></canvas>'
        '<div id="tl-tip"></div></div>'
        '<p class="muted" id="tl-info"></p>'
        '<p class="muted" id="tl-nojs">The timeline needs JavaScript.</p>'
        f'<p class="legend">{legend}</p></section>'
    )


def _charts(result: AnalysisResult) -> str:
    return (
        '<section id="charts"><h2>Charts</h2>'
        "<h3>GPU utilization over time</h3>" + charts.utilization_svg(result.utilization)
        + "<h3>Step time breakdown</h3>" + charts.steps_svg(result.steps)
        + "<h3>Top kernels by GPU time</h3>" + charts.kernels_svg(result.kernels)
        + "<h3>GPU time by category</h3>" + charts.categories_bar(result.categories)
        + "</section>"
    )


def _memory(result: AnalysisResult) -> str:
    """Device memory: the timeline of the busiest device, its peaks, who held memory then."""
    head = '<section id="memory"><h2>Device memory</h2>'
    summary = result.memory
    if summary is None or summary.is_empty():
        return head + charts.memory_svg(None, None, None) + "</section>"
    rank = result.metrics.rank
    peak = memory_headline(summary, rank)
    def td(value: Any) -> str:
        return f"<td>{esc('–' if value is None else value)}</td>"

    rows = [[td(r["device"]), td(r["source"]), _num(fmt_bytes(r["peak_allocated_bytes"])),
             _num(fmt_pct(r["peak_allocated_pct"])), _num(fmt_bytes(r["peak_reserved_bytes"])),
             _num(fmt_pct(r["peak_reserved_pct"])),
             td(r["peak_allocated_step"] if r["peak_allocated_step"] is not None
                else r["peak_reserved_step"])]
            for r in summary.filter(pl.col("rank") == rank).iter_rows(named=True)]
    out = [head, "<p class=\"legend\">allocated: solid; reserved: dashed; the dot marks the "
           "peak; dotted lines mark the steps' starts</p>",
           charts.memory_svg(result.memory_timeline, result.steps, peak),
           _table([("device", ""), ("from", ""), ("peak allocated", "num"), ("% of GPU", "num"),
                   ("peak reserved", "num"), ("% of GPU", "num"), ("peak in step", "")], rows)]
    holders = result.memory_holders
    if holders is not None and not holders.is_empty() and peak is not None:
        held = holders.filter(pl.col("rank") == rank, pl.col("device") == peak["device"])
        out.append("<h3>Held at the allocated peak</h3>" + _table(
            [("operator", ""), ("bytes", "num"), ("% of peak", "num"), ("allocations", "num")],
            [[td(r["operator"]), _num(fmt_bytes(r["bytes"])), _num(fmt_pct(r["pct_of_peak"])),
              _num("–" if r["allocations"] is None else str(r["allocations"]))]
             for r in held.iter_rows(named=True)]))
    return "".join(out) + "</section>"


def _table(head: list[tuple[str, str]], rows: list[list[str]], fold: str | None = None,
           visible: int = 15) -> str:
    """A table; with ``fold`` (an id), rows past ``visible`` hide behind a CSS-only toggle
    (shown when printing)."""
    th = "".join(f'<th class="{c}">{t}</th>' for t, c in head)
    body = "".join(("<tr class=\"more\">" if fold and i >= visible else "<tr>") + "".join(r)
                   + "</tr>" for i, r in enumerate(rows))
    table = f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"
    if not fold or len(rows) <= visible:
        return table
    return (f'<div class="fold"><input type="checkbox" id="{fold}" class="fold-toggle">'
            f'{table}<label for="{fold}" class="fold-label"><span class="show">Show all '
            f'{len(rows)} rows</span><span class="hide">Show the top {visible}</span></label>'
            "</div>")


def _ncu_section(result: AnalysisResult) -> str:
    """Nsight Compute's profiled launches, their verdicts, the findings that name them and
    Nsight Compute's own rules (report/ncu.py); nothing without kernel metrics."""
    from traceanalyzer.report import ncu

    found = ncu.rows(result)
    if not found:
        return ""
    head = [(h, "num" if h in ("Nsight Compute", "Timeline") else "") for h in ncu.HEADERS]
    theirs = any(r["ncu_rules"] for r in found)
    if theirs:
        head.append(("Nsight Compute's rules", ""))
    rows = []
    for r in found:
        cells = [f'<td class="name" title="{esc(r["Kernel"])}">'
                 f'{esc(short_kernel_name(r["Kernel"], 80))}</td>']
        cells += [(_num(r[h]) if c == "num" else f"<td>{esc(r[h])}</td>")
                  for h, c in head[1:len(ncu.HEADERS)]]
        if theirs:
            cells.append(f'<td class="muted">{esc(r["ncu_rules"])}</td>')
        rows.append(cells)
    return (f'<h3 id="ncu">Nsight Compute: profiled kernels</h3><p class="muted">'
            f"{esc(ncu.summary(result))}</p>" + _table(head, rows, fold="ncu-all"))


def _num(text: str) -> str:
    return f'<td class="num">{esc(text)}</td>'


def _tables(result: AnalysisResult) -> str:
    out = ['<section id="kernels"><h2>Top kernels</h2>']
    k = result.kernels
    if k is None or k.is_empty():
        out.append('<p class="muted">No kernels.</p>')
    else:
        from traceanalyzer.report import ncu

        verdicts = ncu.verdict_by_name(result)  # Nsight Compute's, where kernels were profiled
        rows = []
        for r in k.sort("total_ns", descending=True).head(TOP_KERNELS).to_dicts():
            rows.append([
                f'<td class="name" title="{esc(r["name"])}">'
                f'{esc(short_kernel_name(r["name"], 110))}</td>',
                f'<td class="cat"><span class="key {cat_class(r.get("category"))}"></span>'
                f'{esc(r.get("category"))}</td>',
                _num(f"{r.get('instances', 0):,}"), _num(fmt_ns(r.get("total_ns"))),
                _num(fmt_ns(r.get("mean_ns"))), _num(fmt_pct(r.get("pct_gpu_time"))),
                *([f'<td class="ncu">{esc(verdicts.get(r["name"], "–"))}</td>'] if verdicts else []),
            ])
        out.append(_table([("Kernel", ""), ("Category", ""), ("Count", "num"),
                           ("Total", "num"), ("Mean", "num"), ("% GPU time", "num"),
                           *([("Nsight Compute", "")] if verdicts else [])], rows,
                          fold="kernels-all"))
        if k.height > TOP_KERNELS:
            out.append(f'<p class="muted">Top {TOP_KERNELS} of {k.height:,} kernel names; the '
                       "JSON report lists all.</p>")
    out.append(_ncu_section(result))
    out.append('</section><section id="operators"><h2>Top operators by GPU time</h2>')
    ops = result.operators
    if ops is None or ops.is_empty():
        out.append('<p class="muted">No CPU operators linked to GPU work in this trace.</p>')
    else:
        total = finite(result.metrics.busy_ns)
        rows = []
        for r in ops.sort("gpu_ns", descending=True).head(TOP_OPERATORS).to_dicts():
            rows.append([f'<td class="name" title="{esc(r["name"])}">'
                         f'{esc(short_kernel_name(r["name"], 110))}</td>',
                         _num(fmt_ns(r.get("gpu_ns"))), _num(fmt_pct(pct_of(r.get("gpu_ns"), total))),
                         _num(f"{r.get('kernel_count') or 0:,}"), _num(f"{r.get('calls') or 0:,}")])
        out.append(_table([("Operator", ""), ("GPU time", "num"), ("% of busy", "num"),
                           ("Kernels", "num"), ("Calls", "num")], rows, fold="operators-all"))
    out.append("</section>")
    st = result.streams
    if st is not None and not st.is_empty():
        out.append('<section id="streams"><h2>Streams</h2>')
        rows = []
        for r in st.sort(["device", "stream"], nulls_last=True).head(64).to_dicts():
            rows.append([_num(str(r.get("device"))), _num(str(r.get("stream"))),
                         _num(f"{r.get('kernel_count') or 0:,}"), _num(fmt_ns(r.get("busy_ns"))),
                         _num(fmt_ns(r.get("idle_host_wait_ns"))),
                         _num(fmt_ns(r.get("idle_kernel_wait_ns"))),
                         _num(fmt_ns(r.get("idle_other_ns")))])
        out.append(_table([("Device", "num"), ("Stream", "num"), ("Kernels", "num"),
                           ("Busy", "num"), ("Idle: host wait", "num"),
                           ("Idle: kernel wait", "num"), ("Idle: other", "num")], rows))
        out.append("</section>")
    if result.ranks is not None and not result.ranks.is_empty():
        out.append('<section id="ranks"><h2>Ranks</h2>' + _frame_table(result.ranks) + "</section>")
    steps, total = step_rows(result, limit=None)
    if steps:
        out.append(f'<section id="steps"><h2>Steps</h2><p class="muted">{counted(total, "step")} in the '
                   "window; idle as % of each step; the slowest and any outlier (over "
                   f"{OUTLIER_FACTOR:g}× the median step) marked.</p>")
        rows = [[_num(str(r["step"])), _num(fmt_ns(r["duration_ns"])), _num(fmt_pct(r["busy_pct"])),
                 _num(fmt_pct(r["host_wait_pct"])), _num(fmt_pct(r["kernel_wait_pct"])),
                 _num(fmt_pct(r["other_pct"])), _num(f"{r['kernels']:,}"),
                 _num(f"{r['launches'] or 0:,}"), f"<td>{esc(r['mark'])}</td>"] for r in steps]
        out.append(_table([("Step", "num"), ("Time", "num"), ("Busy", "num"),
                           ("Host wait", "num"), ("Kernel wait", "num"), ("Other", "num"),
                           ("Kernels", "num"), ("Launches", "num"), ("", "")], rows,
                          fold="steps-all"))
        out.append("</section>")
    return "".join(out)


def _frame_table(frame: pl.DataFrame, limit: int = 64) -> str:
    rows = []
    for r in frame.head(limit).to_dicts():
        rows.append([_evidence_cell(k, v) for k, v in r.items()])
    return _table([(esc(c), "") for c in frame.columns], rows)


_STATUS_TEXT = {"fired": "fired", "quiet": "quiet", "not_applicable": "not applicable",
                "error": "error in traceanalyzer"}


def _rule_docs() -> dict[str, Any]:
    """Built-in rules by slug, for their titles and rationale; {} if they cannot be loaded (a
    report must render even then)."""
    try:
        from traceanalyzer.rules.loader import load_rules

        return {r.slug: r for r in load_rules([])}
    except Exception:  # noqa: BLE001 - documentation is optional here
        return {}


def _rules(result: AnalysisResult) -> str:
    outs = sorted(result.rule_outcomes, key=lambda o: (o.rule_id, o.slug))
    fired = {f.slug: f for f in result.findings}
    if not outs:
        return '<section id="rules"><h2>Rules</h2><p class="muted">No rules ran.</p></section>'
    docs = _rule_docs()
    rows = []
    for o in outs:
        f = fired.get(o.slug)
        rule = docs.get(o.slug)
        title = (f.title if f else None) or (rule.title if rule else "")
        what = f"<b>{esc(title)}</b>" if title else ""
        if o.reason:
            what += f"<div>{esc(o.reason)}</div>"
        if rule is not None and rule.rationale:
            what += (f"<details><summary>Why it matters</summary><div>{esc(rule.rationale)}"
                     f"</div><div><b>Fix:</b> {esc(rule.fix)}</div></details>")
        elif f is not None and f.fix:
            what += f'<div class="muted">Fix: {esc(f.fix)}</div>'
        status = o.status if o.status in _STATUS_TEXT else "quiet"
        rows.append([
            f'<td id="rule-{esc(_anchor(o.slug))}"><code>{esc(o.rule_id)}</code></td>',
            f"<td><code>{esc(o.slug)}</code></td>",
            f'<td class="status-{status}">{esc(_STATUS_TEXT.get(o.status, o.status))}</td>',
            f"<td>{what}</td>",
        ])
    return ('<section id="rules"><h2>Rules</h2><p class="muted">Every rule that ran, and what '
            "it did. <i>Not applicable</i> means the trace lacks what the rule needs; <i>error</i> "
            "means the rule crashed, a bug in traceanalyzer and no verdict on the trace. Each rule's "
            f"thresholds and examples are in <code>{RULES_DOC}</code> under its slug, or run "
            "<code>traceanalyzer rules show SLUG</code>.</p>"
            + _table([("Id", ""), ("Rule", ""), ("Status", ""), ("Details", "")], rows)
            + "</section>")


def _warnings(result: AnalysisResult) -> str:
    w = result.meta.warnings
    if not w:
        return ('<section id="warnings"><h2>Trace warnings</h2><p class="muted">None: the trace '
                "was read without problems.</p></section>")
    items = "".join(f"<li>{esc(x)}</li>" for x in w[:MAX_WARNINGS])
    more = (f'<p class="muted">… and {len(w) - MAX_WARNINGS} more.</p>'
            if len(w) > MAX_WARNINGS else "")
    return (f'<section id="warnings"><h2>Trace warnings ({len(w)})</h2>'
            f'<ul class="warnings">{items}</ul>{more}</section>')


def _footer() -> str:
    return (
        f"<footer>Made by traceanalyzer {esc(__version__)}. To see findings on the full "
        "timeline, run <code>traceanalyzer analyze TRACE --annotate annotated.json</code> and "
        "open the file in <a href=\"https://ui.perfetto.dev\" rel=\"noreferrer\">ui.perfetto.dev"
        "</a> or <code>chrome://tracing</code>: findings appear on a track named "
        "<i>traceanalyzer findings</i>.</footer>"
    )
