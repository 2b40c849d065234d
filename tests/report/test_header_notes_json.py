"""The header notes (report._common.header_notes) in the JSON, agreeing with the terminal,
Markdown and HTML reports that say them."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import SAMPLES
from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.analysis.result_cache import analyze_path
from traceanalyzer.report._common import header_notes
from traceanalyzer.report.charts import esc
from traceanalyzer.report.html import render_html
from traceanalyzer.report.jsonout import dumps, to_json_dict, validate
from traceanalyzer.report.markdown import md_escape, render_markdown
from traceanalyzer.report.terminal import render_summary, safe

#: Every kind of note: two GPUs used, a GPU span much shorter than the window, CUDA graphs
#: traced as one activity (``kernels``), on both profilers' traces.
PATHS = [
    SAMPLES / "torch" / "naive_model_parallel_bad.json.gz",
    SAMPLES / "torch" / "launch_bound_good.json.gz",
    SAMPLES / "nsys" / "naive_model_parallel_bad.sqlite",
    SAMPLES / "nsys" / "launch_bound_good_graphlevel.sqlite",
]
LABELS = {"device", "window", "steps", "GPU span", "kernels"}


@cache
def _result(path: Path) -> AnalysisResult:
    return analyze_path(path, use_cache=False).result


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.name)
def test_the_json_says_the_notes_the_other_reports_say(path: Path, tmp_path: Path) -> None:
    if not path.exists():
        pytest.skip("sample trace absent")
    result = _result(path)
    doc = json.loads(dumps(to_json_dict(result)))
    assert validate(doc) == []
    notes = [(n.label, n.text) for n in header_notes(result)]
    assert [(n["label"], n["text"]) for n in doc["header_notes"]] == notes
    assert any(label == "window" for label, _ in notes)
    terminal = _flat(render_summary(result))
    markdown = render_markdown(result)
    html = render_html(result)
    for label, text in notes:
        assert _flat(f"{label}: {safe(text)}") in terminal
        assert f"{label[:1].upper() + label[1:]}:** {md_escape(text)}" in markdown
        assert esc(text) in html


def test_every_kind_of_note_was_compared() -> None:
    if not all(p.exists() for p in PATHS):
        pytest.skip("sample traces absent")
    seen = {n.label for p in PATHS for n in header_notes(_result(p))}
    assert seen == LABELS
