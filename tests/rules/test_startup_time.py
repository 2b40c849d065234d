"""startup-time on the whole-process and capture-range recordings of one program."""

from __future__ import annotations

import pytest

from tests.support.paths import SAMPLES
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import read_any

PROGRAMS = SAMPLES / "programs"


def _findings(path, window="steps"):
    result = analyze_trace(choose_window(read_any(path), window))
    return {f.slug: f for f in result.findings}


@pytest.mark.parametrize("path", ["nsys/gpt_bf16_whole.sqlite", "torch/convnet_bf16_torch_whole.json.gz"])
def test_fires_on_whole_process_captures(path):
    f = _findings(PROGRAMS / path)["startup-time"]
    assert f.severity == "info" and f.impact_ns == 0
    assert "before the first step" in f.message


def test_whole_process_nsys_names_the_weight_copies():
    f = _findings(PROGRAMS / "nsys/gpt_bf16_whole.sqlite")["startup-time"]
    assert "101 copies" in f.message and "101 from pageable memory" in f.message


@pytest.mark.parametrize("path", ["nsys/gpt_bf16_range.sqlite", "torch/gpt_bf16_torch.json.gz"])
def test_quiet_on_capture_ranges(path):
    assert "startup-time" not in _findings(PROGRAMS / path)


def test_quiet_when_the_whole_capture_is_judged():
    assert "startup-time" not in _findings(PROGRAMS / "nsys/gpt_bf16_whole.sqlite", "all")
