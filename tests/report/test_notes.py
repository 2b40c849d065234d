"""The notes said under the findings in every report: impacts overlap, and torch.profiler's
with_stack=True slowing the CPU side (checked on the held-out Llama step, whose GPU waited for
the CPU 52% of the window under torch.profiler and 2% under Nsight Systems)."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from tests.support.paths import REPO
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.findings import IMPACTS_OVERLAP
from traceanalyzer.ingest import read_any
from traceanalyzer.report.html import render_html
from traceanalyzer.report.jsonout import JSON_SCHEMA, to_json_dict, validate
from traceanalyzer.report.markdown import render_markdown

HOLDOUT = REPO / "sample_traces" / "holdout"
pytestmark = pytest.mark.slow


@functools.cache
def result(name: str):
    return analyze_trace(read_any(HOLDOUT / name))


def test_torch_profiler_with_stacks_gets_the_overhead_note_in_every_report():
    r = result("torch/llama_compiled_train.json.gz")
    notes = r.notes()
    assert notes[0] == IMPACTS_OVERLAP
    assert "with_stack=True and record_shapes=True" in notes[1] and "52% of its active span" in notes[1]
    doc = to_json_dict(r)
    assert doc["notes"] == notes and validate(doc, JSON_SCHEMA) == []
    assert "with\\_stack=True" in render_markdown(r)  # Markdown-escaped
    assert "with_stack=True" in render_html(r)


def test_no_overhead_note_under_nsight_or_when_the_gpu_is_busy():
    assert not any("with_stack" in n for n in result("nsys/llama_compiled_train.sqlite.gz").notes())
    # bert under torch.profiler with stacks: the GPU is busy 99% of the window
    bert = result("torch/bert_fp32_train.json.gz")
    assert bert.findings and not any("with_stack" in n for n in bert.notes())


def test_no_notes_without_findings():
    # The same with_stack trace that gets the overhead note once a rule fires on it.
    r = dataclasses.replace(result("torch/llama_compiled_train.json.gz"), findings=[])
    assert r.notes() == []
