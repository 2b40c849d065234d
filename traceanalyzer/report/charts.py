"""Static SVG charts for the HTML report: drawn here so they need no script, print well, and
carry their hover text in ``<title>`` elements. Every string from a trace goes through
:func:`esc`. Colours come from CSS classes, so light and dark mode restyle them."""

from __future__ import annotations

import html
from typing import Any

import polars as pl

from traceanalyzer.model import CATEGORIES
from traceanalyzer.report._common import (
    counted,
    finite,
    fmt_bytes,
    fmt_ns,
    fmt_pct,
    short_kernel_name,
)
from traceanalyzer.report.textsafe import visible

MAX_UTIL_POINTS = 600
MAX_STEP_BARS = 200
TOP_KERNEL_BARS = 15

W, H = 900, 180  # viewBox of the time charts
PAD_L, PAD_R, PAD_T, PAD_B = 64, 12, 10, 26


def esc(text: Any) -> str:
    # Terminal escapes (ESC, BEL, CR) would act if the file is cat'ed, bidi overrides would
    # reorder the page's text: shown as visible escapes (\x1b, \u202e) instead.
    return html.escape(visible(text, keep_newlines=True), quote=True)


def cat_class(category: Any) -> str:
    c = str(category)
    return f"c-{c}" if c in CATEGORIES else "c-other"


def _axis_ms(x0: float, x1: float, span_ns: float, ticks: int = 6) -> str:
    parts = []
    for i in range(ticks + 1):
        x = x0 + (x1 - x0) * i / ticks
        anchor = "end" if i == ticks else "middle"
        parts.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" '
                     f'y2="{H - PAD_B}"/><text class="tick" x="{x:.1f}" y="{H - 8}" '
                     f'text-anchor="{anchor}">{esc(fmt_ns(span_ns * i / ticks))}</text>')
    return "".join(parts)


def _axis_pct(y_of, labels=(0, 50, 100)) -> str:
    return "".join(
        f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y_of(v):.1f}" y2="{y_of(v):.1f}"/>'
        f'<text class="tick" x="{PAD_L - 6}" y="{y_of(v) + 4:.1f}" text-anchor="end">{v}%</text>'
        for v in labels)


def utilization_svg(util: pl.DataFrame | None) -> str:
    """GPU busy % over time as an area chart; buckets are averaged down to a few hundred."""
    if util is None or util.is_empty():
        return '<p class="muted">No utilization data.</p>'
    u = util.sort("bucket_start_ns")
    if u.height > MAX_UTIL_POINTS:
        k = -(-u.height // MAX_UTIL_POINTS)
        u = (u.with_row_index("i").group_by(pl.col("i") // k, maintain_order=True)
             .agg(pl.col("bucket_start_ns").min(), pl.col("bucket_end_ns").max(),
                  pl.col("busy_pct").mean()))
    t0 = int(u["bucket_start_ns"].min())  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    span = max(int(u["bucket_end_ns"].max()) - t0, 1)  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x_of(t: int) -> float:
        return PAD_L + iw * (t - t0) / span

    def y_of(p: float) -> float:
        return PAD_T + ih * (1 - min(max(p, 0.0), 100.0) / 100)

    pts = []
    hover = []
    for s, e, p in u.select("bucket_start_ns", "bucket_end_ns", "busy_pct").iter_rows():
        p = finite(p) or 0.0
        pts.append(f"{x_of(s):.1f},{y_of(p):.1f} {x_of(e):.1f},{y_of(p):.1f}")
        hover.append(f'<rect class="hover" x="{x_of(s):.1f}" y="{PAD_T}" '
                     f'width="{max(x_of(e) - x_of(s), 0.5):.1f}" height="{ih}"><title>'
                     f'{esc(fmt_ns(s - t0))}–{esc(fmt_ns(e - t0))}: {p:.1f}% busy</title></rect>')
    line = " ".join(pts)
    base = f"{x_of(t0):.1f},{y_of(0):.1f}"
    area = f'<polygon class="util-area" points="{base} {line} {x_of(t0 + span):.1f},{y_of(0):.1f}"/>'
    return (f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" '
            f'aria-label="GPU utilization over time">{_axis_pct(y_of)}'
            f'{_axis_ms(PAD_L, W - PAD_R, span)}{area}'
            f'<polyline class="util-line" points="{line}"/>{"".join(hover)}</svg>')


_STEP_PARTS = (("busy_ns", "busy", "GPU busy"), ("idle_host_wait_ns", "host", "idle: host wait"),
               ("idle_kernel_wait_ns", "kwait", "idle: kernel wait"),
               ("idle_other_ns", "other", "idle: other"))


def steps_svg(steps: pl.DataFrame | None) -> str:
    """One stacked bar per step: busy time, then idle split by cause (scaled to the step's idle
    time, since causes are summed over streams and can exceed it)."""
    if steps is None or steps.is_empty() or "duration_ns" not in steps.columns:
        return '<p class="muted">No steps found in this trace (no ProfilerStep annotations).</p>'
    s = steps.sort("start_ns") if "start_ns" in steps.columns else steps
    note = ""
    if s.height > MAX_STEP_BARS:
        k = -(-s.height // MAX_STEP_BARS)
        s = s.gather_every(k)
        note = (f'<p class="muted">{counted(steps.height, "step")}; every {k}th is drawn.</p>')
    rows = s.to_dicts()
    top = max((finite(r.get("duration_ns")) or 0 for r in rows), default=0) or 1
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B
    bw = iw / len(rows)
    out = []
    for i, r in enumerate(rows):
        dur = finite(r.get("duration_ns")) or 0.0
        busy = min(finite(r.get("busy_ns")) or 0.0, dur)
        idle = max(dur - busy, 0.0)
        causes = [finite(r.get(c)) or 0.0 for c, _, _ in _STEP_PARTS[1:]]
        scale = idle / sum(causes) if sum(causes) > 0 else 0.0
        parts = [busy] + [c * scale for c in causes]
        if sum(causes) == 0:
            parts[-1] = idle
        x = PAD_L + i * bw
        y = PAD_T + ih
        label = r.get("step") if r.get("step") is not None else r.get("name", i)
        tip = [f"step {label}: {fmt_ns(dur)}"] + [
            f"{name}: {fmt_ns(v)}" for (_, _, name), v in zip(_STEP_PARTS, parts, strict=True)]
        seg = []
        for (_, cls, _), v in zip(_STEP_PARTS, parts, strict=True):
            h = ih * v / top
            y -= h
            seg.append(f'<rect class="st-{cls}" x="{x + bw * 0.1:.1f}" y="{y:.1f}" '
                       f'width="{max(bw * 0.8, 0.5):.1f}" height="{h:.1f}"/>')
        out.append(f'<g>{"".join(seg)}<title>{esc(" · ".join(tip))}</title></g>')

    def y_of(frac: float) -> float:
        return PAD_T + ih * (1 - frac)

    grid = "".join(
        f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y_of(f):.1f}" y2="{y_of(f):.1f}"/>'
        f'<text class="tick" x="{PAD_L - 6}" y="{y_of(f) + 4:.1f}" text-anchor="end">'
        f'{esc(fmt_ns(top * f))}</text>' for f in (0, 0.5, 1))
    first = rows[0].get("step", 0)
    last = rows[-1].get("step", len(rows) - 1)
    axis = (f'<text class="tick" x="{PAD_L}" y="{H - 8}">step {esc(first)}</text>'
            f'<text class="tick" x="{W - PAD_R}" y="{H - 8}" text-anchor="end">'
            f'step {esc(last)}</text>')
    legend = "".join(f'<span class="key st-{cls}"></span>{esc(name)} ' for _, cls, name in
                     _STEP_PARTS)
    return (f'<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="Step time '
            f'breakdown">{grid}{"".join(out)}{axis}</svg><p class="legend">{legend}</p>{note}')


def kernels_svg(kernels: pl.DataFrame | None) -> str:
    """The top kernels by total GPU time as horizontal bars coloured by category."""
    if kernels is None or kernels.is_empty():
        return '<p class="muted">No kernels.</p>'
    top = kernels.sort("total_ns", descending=True).head(TOP_KERNEL_BARS).to_dicts()
    row_h, label_w, w = 22, 400, W
    h = row_h * len(top) + 8
    biggest = max(finite(r["total_ns"]) or 0 for r in top) or 1
    out = []
    for i, r in enumerate(top):
        y = 4 + i * row_h
        bw = (w - label_w - 120) * (finite(r["total_ns"]) or 0) / biggest
        name = str(r["name"])
        short = short_kernel_name(name, 54)
        tip = (f"{name} — {r.get('category')} — {fmt_ns(r['total_ns'])} in "
               f"{r.get('instances', '?')} launches ({fmt_pct(r.get('pct_gpu_time'))} of GPU time)")
        out.append(
            f'<g><text class="klabel" x="{label_w - 8}" y="{y + 15}" text-anchor="end">'
            f'{esc(short)}</text><rect class="{cat_class(r.get("category"))}" x="{label_w}" '
            f'y="{y + 3}" width="{max(bw, 1):.1f}" height="{row_h - 6}" rx="2"/>'
            f'<text class="tick" x="{label_w + bw + 6:.1f}" y="{y + 15}">'
            f'{esc(fmt_ns(r["total_ns"]))} · {esc(fmt_pct(r.get("pct_gpu_time")))}</text>'
            f'<title>{esc(tip)}</title></g>')
    return (f'<svg class="chart kchart" viewBox="0 0 {w} {h}" role="img" '
            f'aria-label="Top kernels by GPU time">{"".join(out)}</svg>')


def categories_bar(categories: pl.DataFrame | None) -> str:
    """GPU time by kernel category as one 100% bar with a legend."""
    if categories is None or categories.is_empty():
        return ""
    rows = categories.sort("total_ns", descending=True).to_dicts()
    total = sum(finite(r["total_ns"]) or 0 for r in rows) or 1
    x = 0.0
    segs, legend = [], []
    for r in rows:
        share = 100 * (finite(r["total_ns"]) or 0) / total
        cls = cat_class(r["category"])
        segs.append(f'<rect class="{cls}" x="{x:.2f}" y="0" width="{share:.2f}" height="10">'
                    f'<title>{esc(r["category"])}: {esc(fmt_ns(r["total_ns"]))} '
                    f'({share:.1f}%)</title></rect>')
        legend.append(f'<span class="key {cls}"></span>{esc(r["category"])} {share:.1f}% ')
        x += share
    return (f'<svg class="catbar" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" '
            f'aria-label="GPU time by category">{"".join(segs)}</svg>'
            f'<p class="legend">{"".join(legend)}</p>')


def memory_svg(timeline: pl.DataFrame | None, steps: pl.DataFrame | None,
               peak: dict[str, Any] | None) -> str:
    """Device memory over the window (analysis.memory.memory_timeline): allocated and reserved
    as step lines, the steps' starts as ticks along the top, the allocated (else reserved) peak
    as a marker."""
    if timeline is None or timeline.is_empty():
        return '<p class="muted">No memory events (torch.profiler: profile_memory=True; ' \
               'Nsight Systems: --cuda-memory-usage=true).</p>'
    t = timeline.sort("ts_ns")
    times = [int(x) for x in (t["ts_ns"].min(), t["ts_ns"].max()) if x is not None]  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    if steps is not None and not steps.is_empty():  # the x axis covers the steps too
        times += [int(x) for x in (steps["start_ns"].min(), steps["end_ns"].max()) if x is not None]  # type: ignore[arg-type]  # Polars: scalar typed for any dtype
    t0 = min(times)
    span = max(max(times) - t0, 1)
    top = max(finite(t["reserved_bytes"].max()) or 0.0, finite(t["allocated_bytes"].max()) or 0.0,
              1.0)
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x_of(ts: int) -> float:
        return PAD_L + iw * min(max(ts - t0, 0), span) / span

    def y_of(b: float) -> float:
        return PAD_T + ih * (1 - min(max(b, 0.0), top) / top)

    def line(column: str, cls: str) -> str:
        pts, last = [], None
        for ts, b in t.select("ts_ns", column).iter_rows():
            if b is None:
                continue
            if last is not None:
                pts.append(f"{x_of(ts):.1f},{y_of(last):.1f}")
            pts.append(f"{x_of(ts):.1f},{y_of(b):.1f}")
            last = b
        if last is not None:  # the total holds until the end of the window
            pts.append(f"{x_of(t0 + span):.1f},{y_of(last):.1f}")
        return f'<polyline class="{cls}" points="{" ".join(pts)}"/>' if pts else ""

    axis = "".join(
        f'<line class="grid" x1="{PAD_L}" x2="{W - PAD_R}" y1="{y_of(top * f):.1f}" '
        f'y2="{y_of(top * f):.1f}"/><text class="tick" x="{PAD_L - 6}" y="{y_of(top * f) + 4:.1f}" '
        f'text-anchor="end">{esc(fmt_bytes(top * f))}</text>' for f in (0, 0.5, 1))
    marks = []
    if steps is not None and not steps.is_empty():
        for step, start in steps.select("step", "start_ns").iter_rows():
            if start is None or not t0 <= start <= t0 + span:
                continue
            x = x_of(start)
            marks.append(f'<line class="mem-step" x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" '
                         f'y2="{H - PAD_B}"><title>step {esc(step)} starts at '
                         f'{esc(fmt_ns(start - t0))}</title></line>')
    dot = ""
    if peak:
        kind = "allocated" if peak.get("peak_allocated_bytes") is not None else "reserved"
        at, b = peak.get(f"peak_{kind}_ns"), peak.get(f"peak_{kind}_bytes")
        if at is not None and b is not None:
            step = peak.get(f"peak_{kind}_step")
            where = f", step {esc(step)}" if step is not None else ""
            dot = (f'<circle class="mem-peak" cx="{x_of(at):.1f}" cy="{y_of(b):.1f}" r="4">'
                         f'<title>peak {kind}: {esc(fmt_bytes(b))} at {esc(fmt_ns(at - t0))}'
                   f'{where}</title></circle>')
    return (f'<svg class="chart" id="memory-chart" viewBox="0 0 {W} {H}" role="img" '
            f'aria-label="Device memory over time">{axis}{_axis_ms(PAD_L, W - PAD_R, span)}'
            f'{"".join(marks)}{line("reserved_bytes", "mem-reserved")}'
            f'{line("allocated_bytes", "mem-allocated")}{dot}</svg>')
