import base64
import hashlib
import json
import re

from tests.support.report_fixtures import (
    HOSTILE,
    hostile_trace_and_result,
    huge_trace_and_result,
    make_result,
    make_trace,
)
from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.report.html import JS, json_for_script, render_html, write_html
from traceanalyzer.report.timeline import MAX_RECTS, MAX_WINDOWS, timeline_data


def _data_blob(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="ta-data">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


def test_sections_and_headline_numbers():
    trace = make_trace()
    page = render_html(make_result(trace), trace)
    for sec in ("summary", "headline", "findings", "timeline", "charts", "kernels", "operators",
                "streams", "rules", "warnings"):
        assert f'id="{sec}"' in page
    assert "70.0%" in page  # busy
    assert "NVIDIA H200" in page and "132 SMs" in page and "rank" in page.lower()
    assert page.index("TA001") < page.index("TA004")  # sorted by impact
    assert 'href="#rule-gpu-idle-gaps"' in page and 'id="rule-gpu-idle-gaps"' in page
    assert 'class="tl-link"' in page
    assert "not applicable" in page and "the trace records no memcpy memory kinds" in page


def test_self_contained_and_csp_pins_the_one_script():
    trace = make_trace()
    page = render_html(make_result(trace), trace)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page.split("<footer")[0]
                         .split('id="rules"')[0].replace('href="https://example.org/idle"', ""))
    assert "<link" not in page and "@import" not in page and "url(" not in page
    digest = base64.b64encode(hashlib.sha256(JS.encode()).digest()).decode()
    import html

    assert f"script-src 'sha256-{digest}'" in html.unescape(page.split("</head>")[0])
    assert f"<script>{JS}</script>" in page
    assert "default-src &#x27;none&#x27;" in page


def test_json_for_script_cannot_close_the_block():
    text = json_for_script({"a": "</script><!-- \u2028\u2029 & >"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == {"a": "</script><!-- \u2028\u2029 & >"}


def test_hostile_strings_are_escaped():
    trace, result = hostile_trace_and_result()
    page = render_html(result, trace)
    for s in HOSTILE:
        if "<" in s or '"' in s:
            assert s not in page, s
    # only the report's own two script elements exist
    assert len(re.findall(r"<script\b", page)) == 2
    assert 'href="javascript' not in page.lower()
    names = _data_blob(page)["names"]
    assert HOSTILE[0] in names  # the data survives, as data


def test_report_without_trace_and_empty_frames():
    r = make_result()
    r.kernels = r.kernels.clear()
    r.steps = r.steps.clear()
    r.utilization = r.utilization.clear()
    r.operators = r.operators.clear()
    r.findings = []
    r.rule_outcomes = []
    page = render_html(r)
    assert "No rule fired" in page and "No steps found" in page and "No timeline" in page


def test_write_html_atomic(tmp_path):
    out = tmp_path / "r.html"
    write_html(make_result(), out)
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_huge_trace_report_stays_small():
    trace, result = huge_trace_and_result()
    page = render_html(result, trace)
    assert len(page.encode()) < 3_000_000, len(page.encode())
    data = _data_blob(page)
    assert len(data["windows"]) <= MAX_WINDOWS
    for w in data["windows"]:
        assert len(w["rects"]) <= MAX_RECTS
        assert w["activities"] >= len(w["rects"])
    whole = [w for w in data["windows"] if w["label"] == "Whole trace"][0]
    assert whole["merged_ns"] > 0 and whole["activities"] == trace.gpu.height


def test_timeline_windows_and_finding_links():
    trace = make_trace()
    result = make_result(trace)
    data = timeline_data(result, trace)
    labels = [w["label"] for w in data["windows"]]
    assert labels[0].startswith("Typical step") and labels[-1] == "Whole trace"
    assert len(data["finding_windows"]) == len(result.findings)
    for f_idx, w_idx in enumerate(data["finding_windows"]):
        assert w_idx is not None
        w = data["windows"][w_idx]
        mark = [m for m in data["marks"] if m["f"] == f_idx][0]
        assert w["start"] <= mark["s"] <= mark["e"] <= w["end"]
    rects = data["windows"][0]["rects"]
    assert all(r[2] >= 0 for r in rects) and {r[0] for r in rects} == {0, 1}
    assert data["windows"][0]["lanes"] == ["GPU 0 · stream 7", "GPU 0 · stream 20"]


def test_timeline_none_without_gpu():
    r = make_result()
    assert timeline_data(r, None) is None
    assert isinstance(r, AnalysisResult)
