"""The HTML report's critical path and what-if section (report/critical.py)."""

from __future__ import annotations

import json

from tests.support.synth import Synth
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.report.critical import section
from traceanalyzer.report.html import render_html
from traceanalyzer.report.jsonout import to_json_dict, validate


def _trace_with_names() -> Synth:
    s = Synth()
    for n in range(3):
        t = n * 1000.0
        s.step(n, t, 1000)
        for k in range(4):
            s.kernel("<script>alert(1)</script>", t + 100 + 200 * k, 20, launch=t + 10 * k)
        s.api("cudaDeviceSynchronize", t + 50, 680)
    return s


def test_section_draws_the_path_and_escapes_trace_text() -> None:
    result = analyze_trace(_trace_with_names().trace())
    html = section(result)
    assert 'id="critical-path"' in html and "<svg" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    page = render_html(result)
    assert page.count('id="critical-path"') == 1


def test_json_steps_carry_the_breakdown_and_findings_their_what_if() -> None:
    result = analyze_trace(_trace_with_names().trace())
    doc = json.loads(json.dumps(to_json_dict(result)))
    assert validate(doc) == []
    for row in doc["steps"]:
        path = row["critical_path"]
        assert sum(path.values()) == row["duration_ns"]
    assert doc["what_if"]["step_time_ns"] > 0
    for f in doc["findings"]:
        assert "what_if" in f and f["what_if"]["assumes"]
