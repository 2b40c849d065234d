"""The job's HTML page (batch/index.py): its section on the critical path across ranks shows the
rows the terminal prints and the figures of the JSON, escaped."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from html.parser import HTMLParser
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.paths import SAMPLES
from tests.support.report_fixtures import HOSTILE
from traceanalyzer.analysis import critical_ranks as cr
from traceanalyzer.analysis.critical_path import CATEGORIES
from traceanalyzer.analysis.job import job_to_dict
from traceanalyzer.analysis.job_reduce import analyze_summaries, reduce_trace
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.batch.index import _job_critical, render_job_page
from traceanalyzer.ingest import load

RANKS = [SAMPLES / "torch" / f"rank_imbalance_bad_rank{r}.json.gz" for r in (0, 1)]


@cache
def _job() -> Any:
    if not all(p.is_file() for p in RANKS):
        pytest.skip("sample traces missing")
    return analyze_summaries([reduce_trace(choose_window(load(p), "steps")) for p in RANKS])


class _Tables(HTMLParser):
    """The text of every cell of every table with an id, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id")
            if self._table:
                self.tables[self._table] = []
        elif self._table and tag == "tr":
            self.tables[self._table].append([])
        elif self._table and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif self._table and tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _tables(page: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def test_job_page_shows_the_critical_path_across_ranks() -> None:
    job = _job()
    assert job.critical is not None
    tables = _tables(render_job_page(job))
    steps, fixes = tables["job-critical-steps"], tables["job-critical-whatif"]
    doc = job_to_dict(job)["critical_path"]
    # One row a job step, the rank that sets it as the JSON names it: each rank in turn.
    assert [r[0] for r in steps[1:]] == [str(s["step"]) for s in doc["steps"]]
    assert [r[2].split(" (")[0] for r in steps[1:]] == ["rank 0", "rank 1", "rank 0"]
    for row, s in zip(steps[1:], doc["steps"], strict=True):
        assert row[1] == f"{s['duration_ns'] / 1e6:.2f} ms"
        assert row[2] == f"rank {s['rank']} ({s['rank_pct']:.0f}%)"
    # The breakdown: the categories the path holds, labelled as in the terminal, with its shares.
    kinds = [c for c in CATEGORIES if any(s[f"{c}_ns"] > 0 for s in doc["steps"])]
    assert steps[0][3:] == [cr.LABEL[c] for c in kinds]
    for row, s in zip(steps[1:], doc["steps"], strict=True):
        shares = [f"{100 * s[f'{c}_ns'] / s['duration_ns']:.0f}%" for c in kinds]
        assert row[3:] == shares
        assert int(row[3 + kinds.index("gpu_compute")].rstrip("%")) >= 90
    # The same rows as the terminal's lines.
    lines = cr.render_lines(job.critical)
    for row in steps[1:]:
        assert any(ln.startswith(f"  step {row[0]}: {row[1]}, set by {row[2]}: ") for ln in lines)
    # The linked what-ifs with what they assume; the balanced ranks save about 1.5 ms a step.
    what_if = doc["what_if"]
    assert [r[0] for r in fixes[1:]] == list(what_if["fixes"])
    for row, (slug, fix) in zip(fixes[1:], what_if["fixes"].items(), strict=True):
        assert row[1] == f"{what_if['step_time_ns'] / 1e6:.2f} ms"
        assert row[2:4] == [f"{fix[k] / 1e6:.2f} ms" for k in ("step_time_ns", "saving_ns")]
        assert row[4] == cr.ASSUMES[slug]
    assert 1.2e6 < what_if["fixes"]["collective-wait"]["saving_ns"] < 1.8e6


def test_the_section_escapes_what_it_shows() -> None:
    jc = _job().critical
    bad = replace(
        jc,
        what_if={
            "step_time_ns": 1,
            "fixes": {h: {"step_time_ns": 1, "saving_ns": 0, "assumes": h} for h in HOSTILE},
        },
    )
    html = _job_critical(SimpleNamespace(critical=bad))
    for h in HOSTILE:
        assert h not in html or "<" not in h and ">" not in h and '"' not in h and "'" not in h
    assert "<script" not in html and "<img" not in html and "<svg" not in html


def test_no_section_without_a_path_across_ranks() -> None:
    assert _job_critical(SimpleNamespace(critical=None)) == ""
    job = _job()
    page = render_job_page(replace(job, critical=None))
    assert 'id="job-critical"' not in page and 'id="job"' in page
