"""Labels that hold on the trace (issue 37): every share says what it divides by (the GPU's
active span, not the window), sentences name what the trace records (no "operator" where a
trace records none), the facts a report opens with come from one place and appear in all three
reports, and a process that drove two GPUs has both named."""

from __future__ import annotations

import html
import json
import re

import pytest

from tests.support.paths import PUBLIC, REPO, SAMPLES
from traceanalyzer import analyze
from traceanalyzer.findings import SHARE_BASE, SHARE_LABEL
from traceanalyzer.report._common import header_notes, impact_text
from traceanalyzer.report.html import render_html
from traceanalyzer.report.jsonout import JSON_SCHEMA, to_json_dict, validate
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.terminal import render_summary
from traceanalyzer.rules.schema import render

NSYS = SAMPLES / "nsys"
RTX = PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite"  # GPU span 22.5 ms of a 236 ms window
#: A share said to be "of the window" ("12% of the window", "share of the window").
WINDOW_SHARE = re.compile(r"%\s+of\s+(the\s+)?window|share\s+of\s+the\s+window")
#: Sentences that speak of an operator where the trace may record none.
#: (A fix may speak of operators on the condition that the trace records them.)
OPERATOR_WORDS = re.compile(
    r"unrecorded operator|no operator recorded|(?<!records operators, )the operator that launched")


def _have(*paths):
    return [p for p in paths if p.exists()]


def _flat(text: str) -> str:
    """Text with its line breaks and runs of spaces as one space (the terminal wraps lines)."""
    return " ".join(text.split())


def _reports(result) -> dict[str, str]:
    # The text as a reader sees it: Markdown's escapes and HTML's entities taken out, the
    # terminal's wrapping undone.
    return {"terminal": _flat(render_summary(result)),
            "markdown": _flat(render_markdown(result).replace("\\", "").replace("\u200d", "")),
            "html": _flat(html.unescape(render_html(result)))}


def test_no_rule_file_or_report_says_a_share_is_of_the_window():
    # Every rule's share and threshold divides by the GPU's active span (detectors'
    # window_length is views.window, the GPU span in the window): the texts say so.
    texts = {p: p.read_text(encoding="utf-8") for p in (REPO / "rules").glob("*.yaml")}
    for folder in ("report", "rules"):
        texts |= {p: p.read_text(encoding="utf-8")
                  for p in (REPO / "traceanalyzer" / folder).rglob("*.py")}
    for name in ("findings.py", "cli/analyze.py", "analysis/result.py"):
        texts[REPO / "traceanalyzer" / name] = (REPO / "traceanalyzer" / name).read_text("utf-8")
    said = {str(p.relative_to(REPO)): m.group(0) for p, t in texts.items()
            if (m := WINDOW_SHARE.search(t))}
    assert not said


SHORT_SPAN = _have(NSYS / "dataloader_stall_bad.sqlite", RTX)


@pytest.mark.skipif(not SHORT_SPAN, reason="traces absent")
@pytest.mark.parametrize("path", SHORT_SPAN, ids=lambda p: p.name)
def test_each_share_is_of_the_gpu_span_and_every_report_says_so(path):
    result = analyze(path, use_cache=False)
    m = result.metrics
    assert m.span_ns < 0.9 * result.window.analyzed_ns  # a span much shorter than the window
    assert result.findings
    reports = _reports(result)
    doc = to_json_dict(result)
    assert validate(doc, JSON_SCHEMA) == []
    for f, jf in zip(result.findings, doc["findings"], strict=True):
        assert f.impact_pct == pytest.approx(100 * f.impact_ns / m.span_ns)
        assert jf["impact"]["pct_of"] == SHARE_BASE
        if f.impact_ns:
            for name, text in reports.items():
                assert _flat(impact_text(f)) in text, (name, f.slug)
    for name, text in reports.items():
        assert not WINDOW_SHARE.search(text), (name, WINDOW_SHARE.search(text))
    idle = next(f for f in result.findings if f.slug == "gpu-idle-gaps")
    said = float(re.search(rf"\(([\d.]+)% {re.escape(SHARE_LABEL)}\)", idle.message)[1])
    assert said == pytest.approx(idle.impact_pct, abs=0.05)  # its idle is its impact


NSYS_TRACES = sorted(NSYS.glob("*.sqlite")) + sorted((SAMPLES / "holdout" / "nsys").glob(
    "*.sqlite.gz"))


@pytest.mark.slow
@pytest.mark.skipif(not NSYS_TRACES, reason="sample traces absent")
def test_no_message_on_an_nsight_trace_speaks_of_an_operator_it_does_not_record():
    fired = 0
    for path in NSYS_TRACES:
        result = analyze(path, use_cache=False)
        for f in result.findings:
            fired += 1
            for text in (f.message, f.fix):
                assert not OPERATOR_WORDS.search(text), (path.name, f.slug, text)
        for o in result.rule_outcomes:
            assert not OPERATOR_WORDS.search(o.reason), (path.name, o.slug, o.reason)
    assert fired > 20


@pytest.mark.skipif(not (NSYS / "sync_memcpy_bad.sqlite").exists(), reason="absent")
def test_nsight_messages_name_the_runtime_calls_instead():
    result = analyze(NSYS / "sync_memcpy_bad.sqlite", use_cache=False)
    by = {f.slug: f.message for f in result.findings}
    assert "(mostly cudaMemcpy) blocked the host" in by["sync-memcpy"]
    assert "mostly from cudaMemcpy calls;" in by["memcpy-bound"]


NOTED = _have(RTX, NSYS / "naive_model_parallel_bad.sqlite", NSYS / "sync_memcpy_bad.sqlite",
              NSYS / "launch_bound_good_graphlevel.sqlite", NSYS / "dataloader_stall_bad.sqlite")


@pytest.mark.skipif(len(NOTED) < 4, reason="traces absent")
@pytest.mark.parametrize("path", NOTED, ids=lambda p: p.name)
def test_every_header_note_appears_in_all_three_reports(path):
    result = analyze(path, use_cache=False)
    notes = header_notes(result)
    assert {"device", "window"} <= {n.label for n in notes}
    reports = _reports(result)
    for note in notes:
        text = _flat(note.text)
        assert f"{note.label}: {text}" in reports["terminal"]
        assert f"**{note.title}:** {text}" in reports["markdown"]
        assert text in reports["html"], (note.label, text)


@pytest.mark.skipif(len(NOTED) < 5, reason="traces absent")
def test_the_traces_above_hold_every_kind_of_note():
    labels = set()
    for path in NOTED:
        labels |= {n.label for n in header_notes(analyze(path, use_cache=False))}
    assert labels == {"device", "window", "steps", "GPU span", "kernels"}


@pytest.mark.skipif(not (NSYS / "naive_model_parallel_bad.sqlite").exists(), reason="absent")
def test_a_rank_on_two_gpus_has_both_named_in_every_report():
    result = analyze(NSYS / "naive_model_parallel_bad.sqlite", use_cache=False)
    assert result.gpus_used == 2
    named = "2 × NVIDIA H200 (GPUs 0, 1)"
    for name, text in _reports(result).items():
        assert named in text, name
    assert json.dumps(to_json_dict(result)["trace"]["devices"]).count("NVIDIA H200") == 2


def test_counts_in_rule_messages_have_thousands_separators():
    template = "{n!p:matrix multiply|matrix multiplies}, {m!p:copy|copies}"
    assert render(template, {"n": 1280, "m": 1}, "test") == "1,280 matrix multiplies, 1 copy"


@pytest.mark.skipif(not (PUBLIC / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite").exists(),
                    reason="public traces absent")
def test_a_gpu_the_trace_does_not_name_is_said_so():
    result = analyze(PUBLIC / "nsys" / "nsysai_2gpu_sendrecv_before.sqlite", use_cache=False)
    assert not any(d.name for d in result.meta.devices)
    device = next(n for n in header_notes(result) if n.label == "device")
    assert device.text == ("GPU 0 (its name not recorded); the trace lists 1 more GPU that ran "
                           "none of this rank's work")
