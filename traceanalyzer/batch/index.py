"""``index.html`` of a batch: one self-contained page linking every trace's report.

Every string from a trace or a file name is escaped; link targets are the sanitized report names
the batch chose, URL-quoted as well. A Content-Security-Policy forbids scripts and network loads,
so the page stays inert even if an escape were missed.
"""

from __future__ import annotations

import os
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

import polars as pl

from traceanalyzer import __version__
from traceanalyzer.report._common import write_text_atomic
from traceanalyzer.report.charts import esc

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; " \
      "form-action 'none'"

_CSS = """
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


def job_section(job: Any, top: int = 10) -> str:
    """An HTML section for a multi-rank job (:class:`traceanalyzer.analysis.job.JobResult`)."""
    from traceanalyzer.analysis.job import exposed_note

    head = ("<tr><th class=n>rank</th><th>trace</th><th class=n>span</th><th class=n>busy</th>"
            "<th class=n>host wait</th><th class=n>comm</th><th class=n>exposed transfer</th>"
            "<th class=n>waited</th><th class=n>collectives</th>"
            "<th class=n>late mean</th><th class=n>late max</th><th class=n>started last</th>"
            "<th class=n>HTA late iters</th></tr>")
    rows = []
    for r in job.ranks.iter_rows(named=True):
        mark = ' class="failed"' if r["straggler"] else ""
        share = "" if r["late_share"] is None else f" ({100 * r['late_share']:.0f}%)"
        hta = "-" if r["hta_late_iterations"] is None else r["hta_late_iterations"]
        rows.append(
            f"<tr{mark}><td class=n>{esc(r['rank'])}{' (straggler)' if r['straggler'] else ''}"
            f"</td><td>{esc(PurePath(r['source'] or '').name)}</td>"
            f"<td class=n>{_ms(r['span_ns'])}</td><td class=n>{_pct(r['busy_pct'])}</td>"
            f"<td class=n>{_pct(r['host_wait_pct'])}</td>"
            f"<td class=n>{_ms(r['communication_ns'])}</td>"
            f"<td class=n>{_ms(r['exposed_comm_ns'])} ({_pct(r['exposed_comm_pct'])})</td>"
            f"<td class=n>{_ms(r['comm_wait_ns'])} ({_pct(r['comm_wait_pct'])})</td>"
            f"<td class=n>{esc(r['collectives'])}</td><td class=n>{_us(r['lateness_mean_ns'])}</td>"
            f"<td class=n>{_us(r['lateness_max_ns'])}</td>"
            f"<td class=n>{esc(r['late_count'])}{share}</td><td class=n>{esc(hta)}</td></tr>"
        )
    verdict = (f"Straggler: rank {', '.join(map(str, job.stragglers))}: it starts its collectives "
               "last, and the other ranks wait for it." if job.stragglers
               else "No straggler stands out.")
    parts = [f'<section id="job"><h2>Job: {job.ranks.height} ranks</h2><p>{esc(verdict)}</p>',
             f"<table>{head}{''.join(rows)}</table>", f"<p>{esc(exposed_note(job.ranks))}</p>"]
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
    parts += [f'<p class="muted">warning: {esc(w)}</p>' for w in job.warnings]
    return "".join(parts) + "</section>"


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
