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
                "<th class=n>GPU busy</th><th class=n>idle</th><th class=n>exposed comm</th>"
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
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>traceanalyzer batch</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts) + "\n</body></html>\n"
    )


def write_index(summary: pl.DataFrame, path: str | os.PathLike[str],
                sections: list[str] | None = None) -> None:
    write_text_atomic(path, render_index(summary, sections))
