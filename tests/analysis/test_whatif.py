"""What-if predictions (analysis/whatif.py) against the measured savings of the workload pairs
(sample_traces/manifest.yaml; the table in sample_traces/README.md)."""

from __future__ import annotations

from functools import cache
from typing import Any

import polars as pl
import pytest
import yaml

import traceanalyzer
from tests.support.paths import SAMPLES
from tests.support.synth import Synth
from traceanalyzer.analysis import analyze_trace, whatif
from traceanalyzer.analysis import critical_path as cp
from traceanalyzer.analysis.views import Views
from traceanalyzer.analysis.window import choose_window, parse_window

#: The problem of each workload: the rules its README row names (sample_traces/README.md). A
#: pair's prediction fixes those of them that fired on the bad trace; gpt_step has several
#: problems at once: every modelled finding ("all of the above").
PROBLEM: dict[str, list[str] | None] = {
    "hidden_sync": ["hidden-sync"],
    "dataloader_stall": ["dataloader-stall"],
    "unfused_elementwise": ["unfused-elementwise-chain"],
    "launch_bound": ["launch-overhead-bound"],
    "small_grid": ["small-grid"],
    "unfused_attention": ["unfused-attention"],
    "fp32_matmul": ["fp32-matmul"],
    "small_batch_decode": ["small-batch-matmul"],
    "odd_matmul_shape": ["odd-matmul-shape", "gemm-below-roofline"],
    "unfused_optimizer": ["unfused-optimizer"],
    "gpt_step": None,
    "naive_model_parallel": ["gpus-take-turns"],
    "sync_memcpy": ["sync-memcpy"],
    "nccl_overlap": ["nccl-not-overlapped"],
    "rank_imbalance": ["collective-wait"],
    "strided_elementwise": ["memory-bound-below-bandwidth"],
}
#: A prediction is good within this share of the measured saving; at least this share of the
#: pairs must be good (issue 36).
TOLERANCE = 0.35
MIN_GOOD_SHARE = 0.8


def pairs() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    traces = yaml.safe_load((SAMPLES / "manifest.yaml").read_text())["traces"]
    out = []
    for bad in traces:
        if bad["variant"] != "bad":
            continue
        good = [
            t
            for t in traces
            if t["workload"] == bad["workload"]
            and t["variant"] == "good"
            and t["profiler"] == bad["profiler"]
            and t.get("rank") == bad.get("rank")
            and "graphlevel" not in t["path"]
        ]
        out.append((bad, good[0]))
    return out


@cache
def _analyzed(path: str) -> tuple[Views, Any]:
    trace = choose_window(traceanalyzer.load(SAMPLES / path), parse_window("steps"))
    views = Views(trace)
    return views, analyze_trace(trace)


def prediction(bad: dict[str, Any], good: dict[str, Any]) -> dict[str, Any]:
    """The bad and good traces' mean step times as recorded, and the bad one's with the pair's
    problem fixed."""
    views, result = _analyzed(bad["path"])
    _, good_result = _analyzed(good["path"])
    graph = cp.build_graph(views, result.metrics.rank)
    assert graph is not None
    fixed = whatif.step_time_with(views, graph, result.findings, PROBLEM[bad["workload"]])
    bad_ns = float(result.steps["duration_ns"].mean())
    good_ns = float(good_result.steps["duration_ns"].mean())
    measured, predicted = bad_ns - good_ns, bad_ns - (fixed or bad_ns)
    return {
        "bad_ns": bad_ns,
        "good_ns": good_ns,
        "fixed_ns": fixed,
        "measured_ns": measured,
        "predicted_ns": predicted,
        "error": (predicted - measured) / measured,
        "detected": PROBLEM[bad["workload"]] is None
        or any(f.slug in PROBLEM[bad["workload"]] for f in result.findings),
    }


def test_predicted_savings_match_the_measured_ones() -> None:
    rows = {bad["path"]: prediction(bad, good) for bad, good in pairs()}
    assert len(rows) == 36
    # A what-if predicts a finding's fix: where the pair's rule cannot fire on the bad trace
    # (its evidence is one torch.profiler alone records), there is no finding to predict from.
    # Those pairs are the Nsight Systems traces of the workloads with torch-only rules, listed
    # in the README's table as misses; the share is judged on the others.
    undetected = {p for p, r in rows.items() if not r["detected"]}
    assert undetected == {"nsys/dataloader_stall_bad.sqlite", "nsys/strided_elementwise_bad.sqlite"}
    judged = {p: r for p, r in rows.items() if p not in undetected}
    good = [p for p, r in judged.items() if abs(r["error"]) <= TOLERANCE]
    assert len(good) >= MIN_GOOD_SHARE * len(judged), sorted(set(judged) - set(good))
    # Small effects count: the 1.2x pairs are predicted too.
    for small in (
        "nsys/hidden_sync_bad.sqlite",
        "torch/rank_imbalance_bad_rank0.json.gz",
        "nsys/rank_imbalance_bad_rank1.sqlite",
    ):
        assert small in good


@pytest.mark.parametrize("path", ["torch/gpt_step_bad.json.gz", "nsys/gpt_step_bad.sqlite"])
def test_every_finding_has_a_what_if(path: str) -> None:
    _, result = _analyzed(path)
    assert result.findings
    assert result.what_if is not None and result.what_if["all"] is not None
    now = result.what_if["step_time_ns"]
    for f in result.findings:
        assert f.what_if is not None and f.what_if["assumes"]
        if f.what_if["step_time_ns"] is not None:
            assert abs(f.what_if["saving_ns"] - (now - f.what_if["step_time_ns"])) <= 1
    # All of the above saves at least what the best single fix saves.
    best = max(f.what_if["saving_ns"] or 0 for f in result.findings if f.what_if)
    assert result.what_if["all"]["saving_ns"] >= best * 0.99


def test_a_symptom_gets_no_prediction_and_says_why() -> None:
    s = Synth()
    for n in range(3):
        t = n * 1000.0
        s.step(n, t, 1000)
        for k in range(4):
            s.kernel("sm90_gemm", t + 100 + 200 * k, 20)
    result = analyze_trace(s.trace())
    gaps = [f for f in result.findings if f.slug == "gpu-idle-gaps"]
    if gaps:  # the idle trace makes the rule fire
        assert gaps[0].what_if is not None and gaps[0].what_if["step_time_ns"] is None
        assert "symptom" in gaps[0].what_if["assumes"]
    assert result.critical_path is not None
    assert result.critical_path.height == 3
    cats = [f"{c}_ns" for c in cp.CATEGORIES]
    assert (
        result.critical_path.select(pl.sum_horizontal(cats)).to_series()
        == result.critical_path["duration_ns"]
    ).all()
