"""The critical path of every rank, and its share on each GPU (analysis/path_ranks.py), in the
analysis, its JSON and reports, and in a job reduced rank by rank."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests.support.paths import SAMPLES
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis.critical_path import CATEGORIES
from traceanalyzer.analysis.job import analyze_job, combine, job_to_dict
from traceanalyzer.analysis.job_reduce import analyze_summaries, reduce_trace
from traceanalyzer.analysis.path_ranks import per_rank
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import load
from traceanalyzer.report.jsonout import dumps, to_json_dict, validate
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.paths_view import GPU_LABEL, TITLE
from traceanalyzer.report.terminal import render_job, render_summary

KINDS = [f"{c}_ns" for c in CATEGORIES]
GPU_KINDS = ["gpu_compute_ns", "gpu_communication_ns", "gpu_copy_ns"]
SPLIT = [
    p
    for p in (
        SAMPLES / "torch" / "naive_model_parallel_bad.json.gz",
        SAMPLES / "nsys" / "naive_model_parallel_bad.sqlite",
    )
    if p.exists()
]
IMBALANCE = [SAMPLES / "torch" / f"rank_imbalance_bad_rank{r}.json.gz" for r in (0, 1)]
HAS_IMBALANCE = all(p.exists() for p in IMBALANCE)


@pytest.mark.skipif(not SPLIT, reason="sample traces absent")
@pytest.mark.parametrize("path", SPLIT, ids=lambda p: p.name)
def test_a_model_split_over_two_gpus_puts_the_path_on_both(path: Path) -> None:
    result = analyze_trace(load(path, use_cache=False))
    gpus = result.critical_path_gpus
    assert gpus is not None and sorted(gpus["device"].unique().to_list()) == [0, 1]
    steps = result.critical_path_ranks
    assert steps is not None
    joined = (
        gpus.group_by("rank", "step")
        .agg(pl.col("path_ns").sum(), n=pl.len())
        .join(steps, on=["rank", "step"])
    )
    for r in joined.iter_rows(named=True):
        assert r["n"] == 2
        # The path's time on the GPUs holds the GPU kinds and stays within the step.
        assert sum(r[k] for k in GPU_KINDS) <= r["path_ns"] <= r["duration_ns"]
    shares = gpus.join(steps, on=["rank", "step"]).select(
        share=pl.col("path_ns") / pl.col("duration_ns")
    )["share"]
    # They take turns: each GPU holds a large part of every step.
    assert shares.min() > 0.3  # type: ignore[operator]
    doc = json.loads(dumps(to_json_dict(result)))
    assert validate(doc) == []
    [row] = doc["critical_path_by_rank"]
    assert [g["device"] for g in row["gpu_path_ns"]] == [0, 1]
    assert row["bound_by"] == "gpu_compute"
    for step in doc["steps"]:
        assert len(step["critical_path_gpus"]) == 2
    text = render_summary(result)
    assert f"{TITLE}:" in text and GPU_LABEL in text
    assert GPU_LABEL in render_markdown(result)


@pytest.mark.skipif(not HAS_IMBALANCE, reason="sample traces absent")
def test_every_rank_of_a_combined_trace_gets_its_path() -> None:
    result = analyze_trace(combine([load(p, use_cache=False) for p in IMBALANCE]))
    paths = result.critical_path_ranks
    assert paths is not None and sorted(paths["rank"].unique().to_list()) == [0, 1]
    # The headline's rows are its own breakdown.
    headline = paths.filter(pl.col("rank") == result.metrics.rank).drop("rank")
    assert result.critical_path is not None
    assert headline.equals(result.critical_path.select(headline.columns))
    # Every rank's kinds add up to its steps.
    total = paths.select(pl.sum_horizontal(KINDS) == pl.col("duration_ns")).to_series()
    assert total.all()
    doc = json.loads(dumps(to_json_dict(result)))
    assert validate(doc) == []
    assert {s["rank"] for s in doc["steps"] if s["critical_path"] is not None} == {0, 1}
    by_rank = {r["rank"]: r for r in doc["critical_path_by_rank"]}
    # Rank 1 waits for rank 0 in two of three steps: its path is mostly the collectives'.
    assert by_rank[0]["bound_by"] == "gpu_compute"
    assert by_rank[1]["bound_by"] == "gpu_communication"
    text = render_summary(result)
    assert f"{TITLE}:" in text


@pytest.mark.skipif(not HAS_IMBALANCE, reason="sample traces absent")
def test_a_job_reduced_rank_by_rank_gives_the_combined_paths() -> None:
    traces = [load(p, use_cache=False) for p in IMBALANCE]
    old = analyze_job(choose_window(combine(traces), "steps"), rules=False)
    new = analyze_summaries([reduce_trace(choose_window(t, "steps")) for t in traces])
    assert old.paths is not None and new.paths is not None
    a = per_rank(old.paths, old.path_gpus)
    b = per_rank(new.paths, new.path_gpus)
    assert a.drop("gpu_path_ns").equals(b.drop("gpu_path_ns"))
    doc = job_to_dict(new)
    assert [r["rank"] for r in doc["critical_path_by_rank"]] == [0, 1]
    json.dumps(doc, allow_nan=False)
    text = render_job(new)
    assert f"{TITLE}:" in text
    table = [re.split(r"\s{2,}", ln.strip()) for ln in text.split(f"{TITLE}:", 1)[1].splitlines()]
    assert table[1][:4] == ["rank", "steps", "step mean", "bound by"]
    assert [row[3] for row in table[3:5]] == ["compute", "comm"]


def test_per_rank_of_nothing_is_empty() -> None:
    from traceanalyzer.analysis.path_ranks import STEP_SCHEMA

    assert per_rank(pl.DataFrame(schema=STEP_SCHEMA)).is_empty()
