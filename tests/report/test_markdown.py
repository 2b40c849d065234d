import re

from tests.support.report_fixtures import hostile_trace_and_result, make_result
from traceanalyzer.report.markdown import md_escape, render_markdown, write_markdown


def test_markdown_summary_has_headline_and_findings(tmp_path):
    text = render_markdown(make_result())
    assert "GPU busy | 70.0%" in text
    assert "TA001" in text and "30.0% of the GPU's active span" in text
    assert text.index("TA001") < text.index("TA004")  # most costly first
    out = tmp_path / "s.md"
    write_markdown(make_result(), out)
    assert out.read_text(encoding="utf-8") == text


def test_markdown_escapes_untrusted_text():
    _, result = hostile_trace_and_result()
    text = render_markdown(result)
    assert "<script" not in text and "<img" not in text and "<svg" not in text
    # no live links: every "[" and "(" that came from a trace is backslash-escaped
    assert not re.search(r"(?<!\\)\[x(?<!\\)\]\(", text)
    assert md_escape("a|b\nc") == "a\\|b c"


def test_reports_say_impacts_do_not_add_up_when_there_are_several():
    from dataclasses import replace

    from traceanalyzer.findings import IMPACTS_OVERLAP
    from traceanalyzer.report.html import render_html
    from traceanalyzer.report.terminal import render_summary

    several = make_result()
    assert len(several.findings) > 1
    one = replace(several, findings=several.findings[:1])
    for render in (render_markdown, render_html, render_summary):
        assert IMPACTS_OVERLAP in render(several), render.__name__
        assert IMPACTS_OVERLAP not in render(one), render.__name__
