"""The performance model in the reports: the MFU rows of the terminal and Markdown summaries,
and the HTML roofline section (an inline SVG chart and the table of operators losing the most
time against their roofline). docs/perf-model.md defines every figure."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

from traceanalyzer.model import shapes_hint
from traceanalyzer.report._common import finite, fmt_flops, fmt_ns, short_kernel_name
from traceanalyzer.report.charts import esc

if TYPE_CHECKING:
    from traceanalyzer.analysis.result import AnalysisResult

#: Operators drawn in the roofline chart and listed in its table.
ROOFLINE_POINTS = 40
ROOFLINE_ROWS = 15
RW, RH = 900, 320
RL, RR, RT, RB = 64, 16, 12, 36


class PerfRow(NamedTuple):
    """A row of the model's summary: a label, its value, and why the value is missing (the value
    is then "–"); the reports place the reason where it fits (a note under the terminal's table,
    the Markdown cell)."""

    label: str
    value: str
    reason: str | None = None


def perf_rows(result: AnalysisResult) -> list[PerfRow]:
    """Rows: model FLOPs per step, achieved TFLOP/s, MFU and its peak, tokens/s."""
    from traceanalyzer.perfmodel import metrics_of

    m = metrics_of(result)
    if m["flops_per_step"] is None:
        return [PerfRow("MFU", "–", m["mfu_reason"])]
    rows = [
        PerfRow(
            "model FLOPs per step",
            fmt_flops(m["flops_per_step"])
            + (" (--flops-per-step)" if m["flops_source"] == "--flops-per-step" else ""),
        )
    ]
    if m["achieved_tflops"] is not None:
        rows.append(PerfRow("achieved", fmt_flops(m["achieved_tflops"] * 1e12, "FLOP/s")))
    if m["mfu_pct"] is not None:
        rows.append(
            PerfRow(
                "MFU", f"{m['mfu_pct']:.1f}% of {m['peak_tflops']:g} TFLOP/s ({m['peak_name']})"
            )
        )
    elif m["mfu_reason"]:
        rows.append(PerfRow("MFU", "–", m["mfu_reason"]))
    if m["tokens_per_s"] is not None:
        rows.append(PerfRow("tokens per second", f"{m['tokens_per_s']:,.0f}"))
    return rows


def _fmt(x: Any, digits: int = 1) -> str:
    v = finite(x)
    return "–" if v is None else f"{v:,.{digits}f}"


def roofline_section(result: AnalysisResult) -> str:
    """The HTML section: a log-log roofline of the operators and the top losers' table."""
    from traceanalyzer.perfmodel import op_roofline, roofline_of

    roof = roofline_of(result)
    head = '<section id="roofline"><h2>Roofline</h2>'
    ops = op_roofline(result)
    if ops.is_empty():
        return (
            head + '<p class="muted">No roofline: the trace records no operator shapes '
            f"({esc(shapes_hint(result.meta.source_format))}).</p></section>"
        )
    bw, peak = roof.bandwidth_gbps, roof.compute_tflops("bf16")
    if not bw or not peak:
        return (
            head + f'<p class="muted">No roofline: no peaks known for '
            f"{esc(roof.device or 'an unrecorded GPU')} (give --peak-tflops and "
            "--peak-bandwidth).</p></section>"
        )
    src = roof.peak_label or ""
    intro = (
        f'<p class="muted">{esc(roof.device or "GPU")}: {peak:g} TFLOP/s ({esc(src)}), '
        f"{bw:g} GB/s; ridge at {roof.ridge('bf16'):.0f} FLOP/B. Each point is an operator "
        "signature (name and shapes), sized by its GPU time; FP32 operators are judged "
        "against the FP32 roof, or the TF32 one where their kernels ran on TF32 tensor cores. "
        "Causal attention is drawn with the FLOPs its kernels execute (about half the square); "
        "MFU counts the full square, as FlopCounterMode.</p>"
    )
    return head + intro + roofline_svg(ops, peak, bw) + _losers_table(ops) + "</section>"


def roofline_svg(ops: Any, peak_tflops: float, bandwidth_gbps: float) -> str:
    """Log-log roofline: intensity (FLOP/B) across, TFLOP/s up; the memory slope, the compute
    roof, the ridge point marked, operators as circles whose area follows their time."""
    pts = ops.filter(ops["intensity"] > 0).head(ROOFLINE_POINTS).to_dicts()
    iw, ih = RW - RL - RR, RH - RT - RB
    x_lo, x_hi = -2.0, 4.0  # 0.01 .. 10^4 FLOP/B
    y_hi = math.ceil(math.log10(peak_tflops * 1.5))
    y_lo = y_hi - 5.0

    def x_of(i: float) -> float:
        return RL + iw * (min(max(math.log10(i), x_lo), x_hi) - x_lo) / (x_hi - x_lo)

    def y_of(t: float) -> float:
        return RT + ih * (
            1 - (min(max(math.log10(max(t, 1e-12)), y_lo), y_hi) - y_lo) / (y_hi - y_lo)
        )

    ridge = peak_tflops * 1e3 / bandwidth_gbps
    out = []
    for e in range(int(x_lo), int(x_hi) + 1):
        x = x_of(10.0**e)
        out.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{RT}" y2="{RH - RB}"/>'
            f'<text class="tick" x="{x:.1f}" y="{RH - RB + 14}" text-anchor="middle">'
            f"{10.0**e:g}</text>"
        )
    for e in range(int(y_lo), int(y_hi) + 1):
        y = y_of(10.0**e)
        out.append(
            f'<line class="grid" x1="{RL}" x2="{RW - RR}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{RL - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{10.0**e:g}</text>"
        )
    x_start = 10.0**x_lo
    roof_line = (
        f"{x_of(x_start):.1f},{y_of(x_start * bandwidth_gbps / 1e3):.1f} "
        f"{x_of(ridge):.1f},{y_of(peak_tflops):.1f} "
        f"{x_of(10.0**x_hi):.1f},{y_of(peak_tflops):.1f}"
    )
    out.append(
        f'<polyline class="roof" fill="none" stroke="currentColor" stroke-width="2" '
        f'points="{roof_line}"/>'
    )
    out.append(
        f'<g class="ridge"><line x1="{x_of(ridge):.1f}" x2="{x_of(ridge):.1f}" '
        f'y1="{y_of(peak_tflops):.1f}" y2="{RH - RB}" stroke="currentColor" '
        f'stroke-dasharray="4 3"/><text class="tick" x="{x_of(ridge) + 4:.1f}" '
        f'y="{y_of(peak_tflops) + 14:.1f}">ridge {ridge:.0f} FLOP/B</text>'
        f"<title>ridge point: {ridge:.0f} FLOP/B</title></g>"
    )
    biggest = max((finite(p["time_ns"]) or 0.0 for p in pts), default=1.0) or 1.0
    for p in pts:
        r = 3.0 + 14.0 * math.sqrt((finite(p["time_ns"]) or 0.0) / biggest)
        cls = f"c-{p['op_class']}" if p["op_class"] in ("gemm", "attention") else "c-other"
        tip = (
            f"{p['name']} {p['input_dims']}: {fmt_ns(p['time_ns'])}, "
            f"{_fmt(p['intensity'])} FLOP/B, {_fmt(p['achieved_tflops'])} TFLOP/s, "
            f"{_fmt(p['achieved_gbps'], 0)} GB/s, {p['bound']}-bound, "
            f"{_fmt(p['roofline_pct'])}% of roofline"
        )
        out.append(
            f'<circle class="rl-point {cls}" cx="{x_of(p["intensity"]):.1f}" '
            f'cy="{y_of(finite(p["achieved_tflops"]) or 0.0):.1f}" r="{r:.1f}" '
            f'fill-opacity="0.6"><title>{esc(tip)}</title></circle>'
        )
    axes = (
        f'<text class="tick" x="{RL + iw / 2:.1f}" y="{RH - 4}" text-anchor="middle">'
        "arithmetic intensity (FLOP/byte)</text>"
        f'<text class="tick" x="12" y="{RT + ih / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {RT + ih / 2:.1f})">TFLOP/s</text>'
    )
    return (
        f'<svg class="chart roofline" viewBox="0 0 {RW} {RH}" role="img" '
        f'aria-label="Roofline of the operators">{"".join(out)}{axes}</svg>'
    )


def _losers_table(ops: Any) -> str:
    rows = []
    for p in ops.head(ROOFLINE_ROWS).to_dicts():
        name = short_kernel_name(str(p["name"]), 60)
        rows.append(
            f'<tr><td title="{esc(p["name"])}"><code>{esc(name)}</code></td>'
            f"<td><code>{esc(p['input_dims'] or '')}</code></td><td>{esc(p['precision'] or '–')}</td>"
            f'<td class="num">{esc(fmt_ns(p["time_ns"]))}</td>'
            f'<td class="num">{_fmt(p["intensity"])}</td>'
            f'<td class="num">{_fmt(p["achieved_tflops"])}</td>'
            f'<td class="num">{_fmt(p["achieved_gbps"], 0)}</td><td>{esc(p["bound"] or "–")}</td>'
            f'<td class="num">{_fmt(p["roofline_pct"])}%</td>'
            f'<td class="num">{esc(fmt_ns(p["lost_ns"]))}</td></tr>'
        )
    return (
        "<h3>Operators losing the most time against their roofline</h3>"
        '<table class="roofline-table"><thead><tr><th>operator</th><th>input shapes</th>'
        "<th>dtype</th><th>time</th><th>FLOP/B</th><th>TFLOP/s</th><th>GB/s</th>"
        "<th>bound</th><th>% of roofline</th><th>lost</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
