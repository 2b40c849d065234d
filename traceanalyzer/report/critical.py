"""The critical path and the what-if predictions in the HTML report (docs/critical-path.md):
findings ranked by the step time their fix is predicted to save, and the critical path of one
step drawn on its timeline, with the breakdown of every step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traceanalyzer.analysis.critical_path import CATEGORIES
from traceanalyzer.report._common import fmt_ns
from traceanalyzer.report.charts import esc
from traceanalyzer.report.whatif_view import ASSUMES_LABEL, TITLE, fmt_ms, whatif_view

if TYPE_CHECKING:
    from traceanalyzer.analysis.result import AnalysisResult

__all__ = ["section"]

#: Colours of the breakdown's categories (CSS colours, fixed: no trace text reaches them).
COLOURS = {
    "gpu_compute": "#3b7dd8",
    "gpu_communication": "#9b59b6",
    "gpu_copy": "#16a085",
    "cpu": "#e67e22",
    "launch": "#f1c40f",
    "host_wait": "#c0392b",
    "data_loading": "#7f8c8d",
    "other": "#bdc3c7",
}
LABELS = {
    "gpu_compute": "GPU compute",
    "gpu_communication": "GPU communication",
    "gpu_copy": "GPU copies",
    "cpu": "CPU (Python, operators)",
    "launch": "CPU launch",
    "host_wait": "host waits",
    "data_loading": "data loading",
    "other": "other",
}
W, LANE_H, LEFT = 900, 18, 110
#: Lanes drawn at most in the path's timeline (the busiest), and bars.
MAX_LANES = 8
MAX_RECTS = 600


def section(result: AnalysisResult) -> str:
    """The section, or "" when the analysis has no critical path."""
    if result.critical_path is None or result.critical_path.is_empty():
        return ""
    return (
        '<section id="critical-path"><h2>Critical path and what-if</h2>'
        + _whatif_table(result)
        + _breakdown(result)
        + _ranks(result)
        + _drawing(result)
        + "</section>"
    )


def _whatif_table(result: AnalysisResult) -> str:
    view = whatif_view(result)
    if view is None:
        return ""
    rows = []
    at = 1 if view.multi_rank else 0  # the label's column
    for r in [*view.rows, *view.totals]:
        cells = [esc(c) for c in r.cells(view.multi_rank)]
        if r.finding is None:  # "all of the above"
            cells[at] = f"<b>{cells[at]}</b>"
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells)
                    + f"<td>{esc(r.assumes)}</td></tr>")
    head = "".join(f"<th>{esc(c)}</th>" for c in [*view.columns, ASSUMES_LABEL])
    note = view.differs_note()
    return (
        f"<h3>{esc(TITLE)}</h3><p>{esc(view.intro())}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        + (f'<p class="muted">{esc(note)}</p>' if note else "")
    )


def _breakdown(result: AnalysisResult) -> str:
    cp = result.critical_path
    assert cp is not None
    cats = [c for c in CATEGORIES if f"{c}_ns" in cp.columns and cp[f"{c}_ns"].sum() > 0]
    head = "".join(f"<th>{LABELS[c]}</th>" for c in cats)
    body = []
    for row in cp.iter_rows(named=True):
        cells = "".join(f"<td>{_ms(row[f'{c}_ns'])}</td>" for c in cats)
        body.append(f"<tr><td>{row['step']}</td><td>{_ms(row['duration_ns'])}</td>{cells}</tr>")
    legend = " ".join(f'<span style="color:{COLOURS[c]}">■</span> {LABELS[c]}' for c in cats)
    return (
        "<h3>What sets each step's time</h3><p>The chain of work that determines when the "
        "step ends, by kind (the kinds add up to the step time).</p>"
        f"<p>{legend}</p><table><thead><tr><th>step</th><th>time</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _ranks(result: AnalysisResult) -> str:
    """Each rank's critical path, where the trace holds several ranks or a rank several GPUs
    (report/paths_view.py)."""
    from traceanalyzer.report.paths_view import TITLE, result_path_table

    heads, rows = result_path_table(result)
    if not rows:
        return ""
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (f"<h3>{esc(TITLE)}</h3><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _drawing(result: AnalysisResult) -> str:
    """The path of the median step on its timeline: one lane for the host, one per GPU stream."""
    cp, seg = result.critical_path, result.critical_segments
    if cp is None or seg is None or seg.is_empty():
        return ""
    ordered = cp.sort("duration_ns", "start_ns", maintain_order=True)
    row = ordered.row(ordered.height // 2, named=True)
    lo, hi = int(row["start_ns"]), int(row["end_ns"])
    if hi <= lo:
        return ""
    import polars as pl

    part = _coalesced(seg.filter(pl.col("end_ns") > lo, pl.col("start_ns") < hi), hi - lo)
    lanes = (
        part.group_by("lane")
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))
        .sort(["t", "lane"], descending=[True, False])
        .head(MAX_LANES)["lane"]
        .to_list()
    )
    lanes = sorted(lanes, key=lambda x: (x != "cpu", x))
    height = LANE_H * len(lanes) + 24
    scale = (W - LEFT - 10) / (hi - lo)
    out: list[str] = []
    for i, lane in enumerate(lanes):
        y = 4 + i * LANE_H
        out.append(f'<text x="4" y="{y + 13}" font-size="11">{esc(lane)}</text>')
    index = {lane: i for i, lane in enumerate(lanes)}
    for r in part.iter_rows(named=True):
        at = index.get(r["lane"])
        if at is None:
            continue
        x0 = LEFT + (max(r["start_ns"], lo) - lo) * scale
        x1 = LEFT + (min(r["end_ns"], hi) - lo) * scale
        colour = COLOURS.get(r["category"], "#999")
        out.append(
            f'<rect x="{x0:.1f}" y="{4 + at * LANE_H + 2}" width="{max(x1 - x0, 0.5):.1f}" '
            f'height="{LANE_H - 4}" fill="{colour}"><title>{esc(r["name"] or "")} '
            f"({LABELS.get(r['category'], r['category'])}, "
            f"{fmt_ns(r['end_ns'] - r['start_ns'])})</title></rect>"
        )
    out.append(
        f'<text x="{LEFT}" y="{height - 4}" font-size="11">0</text>'
        f'<text x="{W - 60}" y="{height - 4}" font-size="11">{fmt_ns(hi - lo)}</text>'
    )
    return (
        f"<h3>The path of step {row['step']} (the median step)</h3>"
        "<p>Each bar is a stretch of the critical path on the host or a GPU stream, coloured "
        "by kind; hover for the call or kernel.</p>"
        f'<svg class="cp" viewBox="0 0 {W} {height}" width="100%" role="img" '
        f'aria-label="critical path of step {row["step"]}">' + "".join(out) + "</svg>"
    )


def _coalesced(part: Any, span: int) -> Any:
    """Neighbouring segments of one lane and kind closer than a pixel drawn as one (named by
    the first, with a count), at most MAX_RECTS of them, the longest: the drawing stays small
    whatever the step holds."""
    import polars as pl

    px = max(span // (W - LEFT - 10), 1)
    # Every order here breaks ties: a report drawn from the cache must be the same bytes.
    part = part.sort("lane", "start_ns", "end_ns", maintain_order=True)
    brk = (
        (pl.col("lane") != pl.col("lane").shift(1))
        | (pl.col("category") != pl.col("category").shift(1))
        | (pl.col("start_ns") - pl.col("end_ns").shift(1) > px)
    ).fill_null(True)
    out = (
        part.with_columns(_g=brk.cum_sum())
        .group_by("_g", maintain_order=True)
        .agg(
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.col("lane").first(),
            pl.col("category").first(),
            pl.col("name").first().str.slice(0, 80),
            n=pl.len(),
        )
        .with_columns(
            name=pl.when(pl.col("n") > 1)
            .then(pl.format("{} and {} more", "name", pl.col("n") - 1))
            .otherwise("name")
        )
    )
    return out.sort(
        pl.col("end_ns") - pl.col("start_ns"), "start_ns", "lane", descending=[True, False, False],
        maintain_order=True,
    ).head(MAX_RECTS)


def _ms(ns: Any) -> str:
    return fmt_ms(ns)
