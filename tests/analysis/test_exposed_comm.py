"""The job view's exposed communication is the nccl-not-overlapped rule's (analysis/comm.py): on
the real 2-GPU nccl_overlap traces the two report the same share for every rank. The nsys traces
hold a set-up barrier before the first step (30 ms on rank 0 of the good run) that both leave out,
while the headline metric stays HTA/TraceLens's whole-trace figure."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.support.paths import SAMPLES
from tests.support.synth import Synth, busy_loop
from traceanalyzer.analysis.comm import exposed_by_rank, step_collectives
from traceanalyzer.analysis.job import analyze_job, combine, exposed_note
from traceanalyzer.analysis.views import Views
from traceanalyzer.ingest import load
from traceanalyzer.report.terminal import render_job
from traceanalyzer.rules import RuleConfig, evaluate

SLUG = "nccl-not-overlapped"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
RUNS = [(fmt, run) for fmt in ("torch", "nsys") for run in ("good", "bad")]


def _paths(fmt: str, run: str) -> list[Path]:
    ext = ".json.gz" if fmt == "torch" else ".sqlite"
    paths = [SAMPLES / fmt / f"nccl_overlap_{run}_rank{r}{ext}" for r in (0, 1)]
    if not all(p.is_file() for p in paths):
        pytest.skip("nccl_overlap sample traces missing")
    return paths


def _rule_exposed_pct(views: Views, rank: int | None = None) -> float:
    """The rule's exposed share on ``rank`` (the headline's by default), with its threshold at 0
    so it always reports it."""
    only = RuleConfig(overrides={SLUG: {"min_exposed_pct": 0}})
    only.disabled = {r.slug for r in only.rules() if r.slug != SLUG}
    findings, _ = evaluate(views, only)
    rank = views.metrics.rank if rank is None else rank
    (finding,) = [f for f in findings if f.slug == SLUG and f.rank == rank]
    return finding.impact_pct


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "run"), RUNS)
def test_job_and_rule_report_the_same_exposed_share(fmt: str, run: str) -> None:
    traces = [load(p) for p in _paths(fmt, run)]
    combined = combine(traces)
    job = analyze_job(combined, rules=False)
    assert job.ranks["rank"].to_list() == [0, 1]
    # In the job, the rule and the job view are one definition (the job trace's own rank is 0).
    # The rules judge each rank of the job trace: each rank's figure is the job view's.
    for rank in (0, 1):
        rule_in_job = _rule_exposed_pct(Views(combined), rank)
        assert job.ranks["exposed_comm_pct"][rank] == pytest.approx(rule_in_job, abs=0.01), (
            fmt, run, rank)
    for trace, row in zip(traces, job.ranks.iter_rows(named=True), strict=True):
        assert trace.meta.rank == row["rank"]
        # Alone, a rank's trace bounds a collective's transfer by its other steps only; in the
        # job the other rank's duration bounds it too, so the job's share can only be smaller.
        alone = _rule_exposed_pct(Views(trace))
        assert row["exposed_comm_pct"] <= alone + 0.01, (fmt, run, row["rank"])
        assert row["exposed_comm_pct"] == pytest.approx(alone, abs=1.0), (fmt, run, row["rank"])
        assert row["exposed_comm_window"] == "steps"
        assert 0 < row["exposed_comm_ns"] <= row["exposed_communication_ns"]
    bad_share = job.ranks["exposed_comm_pct"].min()
    assert (bad_share > 20) if run == "bad" else (job.ranks["exposed_comm_pct"].max() < 5)


@pytest.mark.slow
def test_pre_step_barrier_is_left_out_of_the_job_view_but_not_the_headline() -> None:
    traces = [load(p) for p in _paths("nsys", "good")]
    row = analyze_job(combine(traces), rules=False).ranks.row(0, named=True)
    whole = 100 * row["exposed_communication_ns"] / row["span_ns"]
    assert whole == pytest.approx(8.0, abs=0.1)  # the 30 ms barrier before the first step
    # 2.18% before the wait for the other rank was left out (analysis/comm.py)
    assert row["exposed_comm_pct"] == pytest.approx(2.08, abs=0.05)
    assert Views(traces[0]).metrics.exposed_communication_ns == row["exposed_communication_ns"]


def _rank_with_barrier(*, steps: bool) -> Synth:
    s = Synth()
    s.kernel(NCCL, 0, 2000, launch=-10, stream=20)  # set-up barrier: nothing to overlap with
    end = busy_loop(s, n=20, start=2100)
    s.kernel(NCCL, end + 2, 500, launch=end - 20, stream=20)  # exposed, inside the last step
    if steps:
        s.step(0, 2090, 2110)
        s.step(1, 4200, end - 4200 + 600)
    return s


def test_steps_restrict_per_rank_and_the_note_says_which() -> None:
    # Both record rank 0; combine numbers them 0 and 1 in the order given.
    views = Views(combine([_rank_with_barrier(steps=True).trace(),
                           _rank_with_barrier(steps=False).trace()]))
    assert views.ranks == [0, 1]
    table = exposed_by_rank(views.collectives, views.steps, views.ranks)
    assert table.to_dicts() == [
        {"rank": 0, "exposed_comm_ns": 500_000, "exposed_comm_collectives": 1,
         "exposed_comm_window": "steps", "comm_wait_ns": 0, "exposed_comm_basis": "ranks"},
        {"rank": 1, "exposed_comm_ns": 2_500_000, "exposed_comm_collectives": 2,
         "exposed_comm_window": "trace", "comm_wait_ns": 0, "exposed_comm_basis": "ranks"},
    ]
    note = exposed_note(table)
    assert "rank 0: collectives launched inside profiler steps" in note
    assert "rank 1: all collectives" in note
    assert "nccl-not-overlapped" in note


def test_compute_on_the_same_gpu_covers_a_collective() -> None:
    s = Synth()
    s.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", 0, 1000)
    s.kernel(NCCL, 400, 1000, stream=20)  # 600 µs covered, 400 µs exposed
    s.kernel(NCCL, 3000, 100, stream=20, device=1)  # another GPU's compute would not cover it
    views = Views(s.trace())
    comm = step_collectives(views.launches, views.steps).sort("start_ns")
    assert comm["covered_ns"].to_list() == [600_000, 0]
    assert comm["exposed_ns"].to_list() == [400_000, 100_000]
    assert comm.schema["exposed_ns"] == pl.Int64


@pytest.mark.slow
def test_the_job_shows_what_each_rank_waited() -> None:
    # rank_imbalance: each step one rank's batch is twice the other's; the short rank's
    # all-reduces wait. In the job both ranks bound each transfer, and the job view's figure is
    # the rule collective-wait's on the job trace.
    paths = [SAMPLES / "torch" / f"rank_imbalance_bad_rank{r}.json.gz" for r in (0, 1)]
    if not all(p.is_file() for p in paths):
        pytest.skip("rank_imbalance sample traces missing")
    combined = combine([load(p) for p in paths])
    job = analyze_job(combined, rules=False)
    waited = job.ranks["comm_wait_pct"].to_list()
    assert all(w > 5 for w in waited), waited
    rule = RuleConfig()
    rule.disabled = {r.slug for r in rule.rules() if r.slug != "collective-wait"}
    found = {f.rank: f for f in evaluate(Views(combined), rule)[0]}
    assert set(found) == {0, 1}  # both ranks waited; the rules judge each
    for rank in (0, 1):
        assert found[rank].impact_pct == pytest.approx(waited[rank], abs=0.01)
    assert "waited" in render_job(job)


def test_the_job_shows_each_ranks_wait_for_its_host() -> None:
    # The held-out DDP run under torch.profiler with stacks: both ranks' GPUs wait for their
    # hosts a third of the span or more (CPU-bound), which is why they drift apart.
    paths = [SAMPLES / "holdout" / "torch" / f"ddp_gpt_train_rank{r}.json.gz" for r in (0, 1)]
    if not all(p.is_file() for p in paths):
        pytest.skip("held-out DDP traces missing")
    job = analyze_job(combine([load(p) for p in paths]), rules=False)
    ranks = job.ranks
    expected = (100.0 * ranks["idle_host_wait_ns"] / ranks["span_ns"]).to_list()
    assert ranks["host_wait_pct"].to_list() == pytest.approx(expected)
    assert all(h > 30 for h in expected), expected
    assert "host wait" in render_job(job)
