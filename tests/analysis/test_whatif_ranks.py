"""Every rank's findings get their what-if on that rank's own graph (analysis/whatif.py through
analysis/path_ranks.every_rank), with "all of the above" per rank, in the JSON and the reports'
what-if tables."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer.analysis import AnalysisResult, analyze_trace
from traceanalyzer.analysis.job import combine
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import load
from traceanalyzer.report.html import render_html
from traceanalyzer.report.jsonout import dumps, to_json_dict, validate
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.terminal import render_job, render_summary
from traceanalyzer.report.whatif_view import (
    ALL_LABEL,
    JOB_SAVING_LABEL,
    NO_RANK_PATH,
    job_savings,
    whatif_view,
)

PAIRS = ["rank_imbalance_bad", "nccl_overlap_bad"]


def _files(name: str) -> list[Path]:
    return [SAMPLES / "torch" / f"{name}_rank{r}.json.gz" for r in (0, 1)]


@cache
def _job(name: str) -> tuple[AnalysisResult, AnalysisResult]:
    """The two ranks as one trace (the rules judge each rank of it: rank 1 is a rank that is
    not the headline), and rank 1's file analyzed alone."""
    traces = [choose_window(load(p, use_cache=False), "steps") for p in _files(name)]
    alone = analyze_trace(traces[1])
    result = analyze_trace(combine(traces))
    assert result.metrics.rank == 0 and {f.rank for f in result.findings} == {0, 1}
    return result, alone


@pytest.mark.parametrize("name", PAIRS)
def test_another_ranks_findings_are_predicted_on_its_own_graph(name: str) -> None:
    if not all(p.exists() for p in _files(name)):
        pytest.skip("sample traces absent")
    result, alone = _job(name)
    others = [f for f in result.findings if f.rank == 1]
    assert others
    # About the prediction on rank 1's file alone: its own graph, not the headline's. In the
    # joint trace the other rank bounds each collective's transfer too, so the communication
    # findings' evidence (and so their savings) may differ a little (test_exposed_comm.py).
    mine = {f.slug: f for f in alone.findings}
    assert {f.slug for f in others} == set(mine)
    for f in others:
        g = mine[f.slug]
        assert f.what_if["saving_ns"] == pytest.approx(g.what_if["saving_ns"], rel=0.05), f.slug
    assert any((f.what_if or {}).get("saving_ns") for f in others)
    assert result.what_if is not None and alone.what_if is not None
    by_rank = {s["rank"]: s for s in result.what_if["ranks"]}
    assert sorted(by_rank) == [0, 1]
    # rank 1's step time now is its own graph's, as alone; so is "all of the above", about
    assert by_rank[1]["step_time_ns"] == alone.what_if["step_time_ns"]
    assert by_rank[1]["all"]["step_time_ns"] == pytest.approx(
        alone.what_if["all"]["step_time_ns"], rel=0.01)
    assert result.what_if["rank"] == 0 and by_rank[0]["all"] == result.what_if["all"]
    # The JSON and the reports say it per rank.
    doc = json.loads(dumps(to_json_dict(result)))
    assert validate(doc) == []
    assert [s["rank"] for s in doc["what_if"]["ranks"]] == [0, 1]
    assert {(r["slug"], r["rank"]) for r in doc["what_if"]["ranking"]} == {
        (f.slug, f.rank) for f in result.findings
    }
    view = whatif_view(result)
    assert view is not None and view.multi_rank
    assert [(t.label, t.rank) for t in view.totals] == [(ALL_LABEL, 0), (ALL_LABEL, 1)]
    assert all(r.assumes != NO_RANK_PATH for r in view.rows)
    text, md = render_summary(result), render_markdown(result)
    for r in (0, 1):
        now = by_rank[r]["step_time_ns"] / 1e6
        assert f"{now:,.3f} ms on rank {r}" in text
    assert md.count(ALL_LABEL) >= 2
    assert render_html(result).count(ALL_LABEL) >= 2


@pytest.mark.parametrize("name", PAIRS)
def test_each_rank_file_alone_gets_its_what_if(name: str) -> None:
    for path in _files(name):
        if not path.exists():
            pytest.skip("sample traces absent")
        result = analyze_trace(choose_window(load(path, use_cache=False), "steps"))
        assert result.findings and result.what_if is not None
        assert "ranks" not in result.what_if  # one rank: its summary is the headline's
        for f in result.findings:
            assert f.what_if is not None and f.what_if["saving_ns"] is not None


def _one_file_of_several() -> list[Path]:
    paths = [SAMPLES / "nsys" / "naive_model_parallel_bad.sqlite"]
    folder = PUBLIC / "nsys"
    if folder.is_dir():
        paths.append(folder / "nsysai_2gpu_sendrecv_before.sqlite")
    return [p for p in paths if p.exists()]


@pytest.mark.parametrize("path", _one_file_of_several(), ids=lambda p: p.name)
def test_a_file_of_several_gpus_or_ranks_predicts_every_finding(path: Path) -> None:
    """One process on two GPUs, or two processes in one export: every finding's rank has its
    graph, so none is left without a prediction for want of one."""
    result = analyze_trace(load(path, use_cache=False))
    assert result.what_if is not None and result.findings
    assert all(f.what_if is not None for f in result.findings)
    assert all(f.what_if["assumes"] != NO_RANK_PATH for f in result.findings)  # type: ignore[index]
    assert any(f.what_if["saving_ns"] for f in result.findings)  # type: ignore[index]


@pytest.mark.parametrize("name", PAIRS)
def test_a_job_reduced_rank_by_rank_gives_each_ranks_what_if(name: str) -> None:
    from traceanalyzer.analysis.job import job_to_dict
    from traceanalyzer.analysis.job_reduce import analyze_summaries, reduce_trace

    if not all(p.exists() for p in _files(name)):
        pytest.skip("sample traces absent")
    traces = [choose_window(load(p, use_cache=False), "steps") for p in _files(name)]
    job = analyze_summaries([reduce_trace(t, rules=True) for t in traces])
    doc = job_to_dict(job)
    json.dumps(doc, allow_nan=False)
    got = {
        (row["slug"], w["rank"]): (w["step_time_ns"], w["saving_ns"])
        for row in doc["rank_findings"]
        for w in row["what_if_by_rank"]
    }
    # Each file analyzed alone predicts the same on its rank's graph.
    want = {}
    for t in traces:
        for f in analyze_trace(t).findings:
            w = f.what_if or {}
            want[(f.slug, f.rank)] = (w.get("step_time_ns"), w.get("saving_ns"))
    assert got == want
    assert any(saving for _, saving in got.values())
    for row in doc["rank_findings"]:
        savings = [w["saving_ns"] for w in row["what_if_by_rank"] if w["saving_ns"] is not None]
        assert row["what_if_saving_ns"] == (sum(savings) if savings else None)
    # The job's terminal report says each rank's saving beside the rule.
    text = render_job(job)
    assert JOB_SAVING_LABEL in text
    for row in doc["rank_findings"]:
        assert job_savings(row["what_if_by_rank"]) in text
