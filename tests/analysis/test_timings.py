"""The per-step timings of a run (traceanalyzer.analysis.timings): off by default, and nested
steps counted once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from traceanalyzer.analysis import timings

REPO = Path(__file__).resolve().parents[2]


def test_off_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(timings.ENV, raising=False)
    before = len(timings.records())
    with timings.step("outer", "rule"):
        pass
    assert len(timings.records()) == before


def test_nested_step_is_not_counted_twice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(timings.ENV, str(tmp_path / "t.json"))
    before = len(timings.records())
    with timings.step("outer", "rule"):
        with timings.step("inner", "view"):
            sum(range(200_000))
    inner, outer = timings.records()[before:]
    assert (inner["name"], inner["kind"], inner["depth"]) == ("inner", "view", 1)
    assert (outer["name"], outer["depth"]) == ("outer", 0)
    assert outer["wall_s"] >= inner["wall_s"]
    assert outer["self_wall_s"] == pytest.approx(outer["wall_s"] - inner["wall_s"], abs=1e-5)
    assert inner["rss_mb"] > 0


def test_cli_run_writes_every_rule_and_report(tmp_path: Path) -> None:
    trace = REPO / "sample_traces" / "torch" / "gpt_step_bad.json.gz"
    out = tmp_path / "t.json"
    env = {"PYTHONPATH": str(REPO), timings.ENV: str(out), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-m", "traceanalyzer", "analyze", str(trace), "--no-cache",
                    "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html"), "-qq"],
                   check=True, env=env, cwd=tmp_path)
    doc = json.loads(out.read_text())
    steps = {(s["kind"], s["name"]) for s in doc["steps"]}
    assert {("ingest", "ingest"), ("view", "launches"), ("rule", "hidden-sync"),
            ("report", "json"), ("report", "html")} <= steps
    assert doc["peak_rss_mb"] > 0
