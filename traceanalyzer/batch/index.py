"""``index.html`` of a batch: one self-contained page linking every trace's report.

Every string from a trace or a file name is escaped; link targets are the sanitized report names
the batch chose, URL-quoted as well. A Content-Security-Policy forbids scripts and network loads,
so the page stays inert even if an escape were missed.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path, PurePath
from typing import Any
from urllib.parse import quote

import polars as pl

from traceanalyzer import __version__
from traceanalyzer.report._common import write_text_atomic
from traceanalyzer.report.charts import esc

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; " \
      "form-action 'none'"

_CSS = """
h3{font-size:1rem;margin-top:1.2rem}th[aria-sort]{text-decoration:underline}
body{font:14px/1.4 system-ui,sans-serif;margin:2rem;color:#1b1f24}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;margin-top:.5rem}
th,td{padding:.25rem .6rem;border-bottom:1px solid #d8dee4;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.failed{color:#b42318}.muted{color:#57606a}
.sev-critical,.sev-high{color:#b42318;font-weight:600}.sev-medium{color:#9a6700}
code{font-size:12px;word-break:break-all}
"""


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value / 1e6:.2f} ms"


def render_index(summary: pl.DataFrame, sections: list[str] | None = None) -> str:
    """The index page for ``summary`` (see :mod:`traceanalyzer.batch.summary`).

    ``sections`` are extra HTML fragments (already escaped) appended after the tables, e.g. the
    multi-rank job section.
    """
    rows = summary.to_dicts()
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    parts = [
        f"<h1>traceanalyzer batch: {len(rows)} traces</h1>",
        f'<p class="muted">{len(ok)} analyzed, {len(failed)} failed. '
        f"traceanalyzer {esc(__version__)}. summary.csv and summary.parquet hold every metric.</p>",
    ]
    if ok:
        head = ("<tr><th>trace</th><th>format</th><th>device</th><th class=n>rank</th>"
                "<th class=n>GPU busy</th><th class=n>idle</th><th class=n>exposed</th>"
                "<th class=n>step mean</th><th class=n>findings</th><th>worst</th></tr>")
        body = []
        for r in ok:
            name = PurePath(r["path"]).name or r["path"]
            link = quote(r["report"] or "", safe="/")
            sev = r["worst_severity"] or ""
            body.append(
                f'<tr><td><a href="{esc(link)}" title="{esc(r["path"])}">{esc(name)}</a></td>'
                f"<td>{esc(r['format'] or '')}</td><td>{esc(r['device'] or '-')}</td>"
                f"<td class=n>{esc(r['rank'])}</td>"
                f"<td class=n>{_pct(r['busy_pct'])}</td><td class=n>{_pct(r['idle_pct'])}</td>"
                f"<td class=n>{_pct(r['exposed_communication_pct'])}</td>"
                f"<td class=n>{_ms(r['step_time_mean_ns'])}</td>"
                f"<td class=n>{esc(r['findings'])}</td>"
                f'<td class="sev-{esc(sev)}">{esc(sev or "-")}</td></tr>'
            )
        parts.append(f"<h2>Analyzed</h2><table>{head}{''.join(body)}</table>")
    if failed:
        body = [f'<tr><td><code>{esc(r["path"])}</code></td>'
                f'<td class="failed">{esc(r["error"] or "failed")}</td></tr>' for r in failed]
        parts.append("<h2>Failed</h2><table><tr><th>trace</th><th>error</th></tr>"
                     f"{''.join(body)}</table>")
    parts.extend(sections or [])
    return render_page("traceanalyzer batch", parts)


#: The per-rank table's columns in the HTML: (column, header, format).
_RANK_COLUMNS = [
    ("rank", "rank", "int"), ("host", "host", "text"), ("source", "trace", "name"),
    ("span_ns", "span", "ms"), ("busy_pct", "busy", "pct"), ("host_wait_pct", "host wait", "pct"),
    ("communication_ns", "comm", "ms"), ("exposed_comm_ns", "exposed transfer", "ms"),
    ("exposed_comm_pct", "exposed %", "pct"), ("comm_wait_ns", "waited", "ms"),
    ("comm_wait_pct", "waited %", "pct"), ("step_time_mean_ns", "step mean", "ms"),
    ("step_time_p95_ns", "step p95", "ms"), ("collectives", "collectives", "int"),
    ("lateness_mean_ns", "late mean", "us"), ("lateness_max_ns", "late max", "us"),
    ("late_count", "started last", "int"), ("late_share", "started last %", "share"),
    ("hta_late_iterations", "HTA late iters", "int"), ("findings", "findings", "int"),
]


def _cell(value: Any, how: str) -> str:
    if value is None:
        return '<td class=n data-v="">-</td>'
    if how in ("text", "name"):
        shown = PurePath(str(value)).name if how == "name" else str(value)
        return f'<td data-v="{esc(shown)}" title="{esc(value)}">{esc(shown)}</td>'
    text = {"ms": _ms, "pct": _pct, "us": _us,
            "share": lambda v: f"{100 * v:.0f}%"}.get(how, lambda v: f"{v}")(value)
    return f'<td class=n data-v="{esc(value)}">{esc(text)}</td>'


def rank_table_html(ranks: pl.DataFrame) -> str:
    """Every rank as one row of a table the job page's script sorts (``table.sortable``)."""
    cols = [c for c in _RANK_COLUMNS if c[0] in ranks.columns]
    head = "".join(f"<th{' class=n' if how not in ('text', 'name') else ''}>{esc(h)}</th>"
                   for _, h, how in cols)
    rows = []
    for r in ranks.iter_rows(named=True):
        mark = ' class="failed"' if r.get("straggler") else ""
        rows.append(f"<tr{mark}>" + "".join(_cell(r[c], how) for c, _, how in cols) + "</tr>")
    return (f'<table class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _fmt_metric(value: Any, unit: str) -> str:
    from traceanalyzer.report.terminal import fmt_metric

    return fmt_metric(value, unit)


def job_section(job: Any, top: int = 10, rank_rows: bool = True, link: str | None = None) -> str:
    """An HTML section for a multi-rank job (:class:`traceanalyzer.analysis.job.JobResult`):
    the verdict, the distributions of the per-rank metrics, hosts, the most skewed collectives,
    cross-rank findings, failed traces and (``rank_rows``) the per-rank table; ``link``: a page
    that holds the sortable table."""
    from traceanalyzer.analysis.job import exposed_note

    scale = job.scale
    verdict = (f"Straggler: rank {', '.join(map(str, job.stragglers))}: it starts its collectives "
               "last, and the other ranks wait for it." if job.stragglers
               else "No straggler stands out.")
    parts = [f'<section id="job"><h2>Job: {job.ranks.height} ranks</h2><p>{esc(verdict)}</p>']
    if scale is not None:
        parts += [f"<p>{esc(f['message'])}</p>" for f in scale.findings
                  if f["kind"].startswith("straggler")]
        if scale.distributions.height and job.ranks.height > 2:
            body = "".join(
                f"<tr><td>{esc(d['metric'])}</td>"
                + "".join(f"<td class=n>{esc(_fmt_metric(d[k], d['unit']))}</td>"
                          for k in ("min", "p50", "p95", "max"))
                + f"<td>{esc(', '.join(map(str, d['outlier_ranks'])) or '-')}"
                + (f" (+{d['outliers'] - len(d['outlier_ranks'])})"
                   if d["outliers"] > len(d["outlier_ranks"]) else "") + "</td></tr>"
                for d in scale.distributions.iter_rows(named=True))
            parts.append("<h3>Per-rank metrics over the ranks</h3><table><tr><th>metric</th>"
                         "<th class=n>min</th><th class=n>p50</th><th class=n>p95</th>"
                         f"<th class=n>max</th><th>outlier ranks</th></tr>{body}</table>")
        if scale.hosts is not None and scale.hosts.height > 1:
            body = "".join(
                f"<tr><td>{esc(h['host'] or '-')}</td><td class=n>{esc(h['ranks'])}</td>"
                f"<td class=n>{esc(h['first_rank'])}</td><td class=n>{_us(h['lateness_mean_ns'])}"
                f"</td><td class=n>{100 * h['late_share']:.0f}%</td>"
                f"<td class=n>{_ms(h['step_time_mean_ns'])}</td><td class=n>{_pct(h['busy_pct'])}"
                "</td></tr>" for h in scale.hosts.iter_rows(named=True))
            parts.append("<h3>Hosts, latest first</h3><table><tr><th>host</th><th class=n>ranks"
                         "</th><th class=n>first rank</th><th class=n>late mean</th>"
                         "<th class=n>started last</th><th class=n>step mean</th>"
                         f"<th class=n>busy</th></tr>{body}</table>")
    coll = job.collectives
    if coll.height:
        skew = coll["skew_ns"]
        parts.append(f"<p>Collective skew over {coll.height} matched collectives: mean "
                     f"{_us(skew.mean())}, median {_us(skew.median())}, max {_us(skew.max())}.</p>")
        worst = coll.sort(["skew_ns", "first_start_ns"], descending=[True, False]).head(top)
        body = "".join(
            f"<tr><td class=n>{esc('-' if w['step'] is None else w['step'])}</td>"
            f"<td><code>{esc(w['name'])}</code></td><td class=n>{esc(w['ordinal'])}</td>"
            f"<td class=n>{_us(w['skew_ns'])}</td><td class=n>{esc(w['latest_rank'])}</td></tr>"
            for w in worst.iter_rows(named=True))
        parts.append("<table><tr><th class=n>step</th><th>collective</th><th class=n>#</th>"
                     f"<th class=n>skew</th><th class=n>last rank</th></tr>{body}</table>")
    if scale is not None:
        others = [f for f in scale.findings if not f["kind"].startswith("straggler")]
        if others:
            parts.append("<h3>Cross-rank findings</h3><ul>" + "".join(
                f"<li>[{esc(f['kind'])}] {esc(f['message'])}</li>" for f in others) + "</ul>")
        if scale.rank_findings.height:
            body = "".join(
                f"<tr><td>{esc(f['slug'])}</td><td>{esc(f['severity'])}</td>"
                f"<td class=n>{esc(f['ranks'])}</td><td class=n>{_ms(f['impact_ns'])}</td>"
                f"<td>{esc(', '.join(map(str, f['top_ranks'])))}</td></tr>"
                for f in scale.rank_findings.iter_rows(named=True))
            parts.append("<h3>Per-rank findings</h3><table><tr><th>rule</th><th>severity</th>"
                         "<th class=n>ranks</th><th class=n>impact (sum)</th><th>worst ranks</th>"
                         f"</tr>{body}</table>")
    parts.append(_job_paths(job))
    if job.failed:
        body = "".join(f'<tr><td><code>{esc(f["path"])}</code></td>'
                       f'<td class="failed">{esc(f["error"])}</td></tr>' for f in job.failed)
        parts.append(f"<h3>Traces that failed to load ({len(job.failed)})</h3>"
                     f"<table><tr><th>trace</th><th>error</th></tr>{body}</table>")
    if rank_rows:
        parts += ["<h3>Ranks</h3>", rank_table_html(job.ranks),
                  f"<p>{esc(exposed_note(job.ranks))}</p>"]
    if link:
        parts.append(f'<p><a href="{esc(quote(link))}">Every rank, in a sortable table</a></p>')
    parts += [f'<p class="muted">warning: {esc(w)}</p>' for w in job.warnings]
    return "".join(parts) + "</section>"


#: Ranks whose critical path the job page lists at most (the JSON has every rank's).
JOB_PATH_MAX_RANKS = 64


def _job_paths(job: Any) -> str:
    """Each rank's critical path (report/paths_view.py), for up to JOB_PATH_MAX_RANKS ranks."""
    from traceanalyzer.analysis.path_ranks import per_rank
    from traceanalyzer.report.paths_view import TITLE, path_table

    paths = getattr(job, "paths", None)
    if paths is None or paths.is_empty():
        return ""
    frame = per_rank(paths, getattr(job, "path_gpus", None))
    heads, rows = path_table(frame.head(JOB_PATH_MAX_RANKS))
    more = (f"<p>The first {JOB_PATH_MAX_RANKS} of {frame.height} ranks; every rank's is in the "
            "JSON (critical_path_by_rank).</p>" if frame.height > JOB_PATH_MAX_RANKS else "")
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h3>{esc(TITLE)}</h3><table><tr>{head}</tr>{body}</table>{more}"


_SORT_JS = (Path(__file__).parent.parent / "report" / "assets" / "sort.js").read_text(
    encoding="utf-8")
_SORT_HASH = base64.b64encode(hashlib.sha256(_SORT_JS.encode("utf-8")).digest()).decode("ascii")
JOB_CSP = (f"default-src 'none'; script-src 'sha256-{_SORT_HASH}'; style-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")


def render_job_page(job: Any, top: int = 10) -> str:
    """The job's own page: :func:`job_section` with its per-rank table, sortable by any column
    (one script, allowed by its hash alone)."""
    page = render_page("traceanalyzer job", [job_section(job, top)])
    page = page.replace(f'content="{esc(CSP)}"', f'content="{esc(JOB_CSP)}"', 1)
    return page.replace("\n</body></html>\n", f"\n<script>{_SORT_JS}</script>\n</body></html>\n")


def _us(value: Any) -> str:
    return "-" if value is None else f"{value / 1e3:.1f} µs"


def render_page(title: str, sections: list[str]) -> str:
    """A bare self-contained page around ``sections`` (already escaped HTML)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(sections) + "\n</body></html>\n"
    )


def write_index(summary: pl.DataFrame, path: str | os.PathLike[str],
                sections: list[str] | None = None) -> None:
    write_text_atomic(path, render_index(summary, sections))
