"""A job reduced rank by rank equals the combined-trace analysis; the view at scale."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.analysis.test_job import rank_trace
from tests.support.kineto_builder import KinetoBuilder
from tests.support.paths import SAMPLES
from traceanalyzer.analysis.job import analyze_job, combine, job_to_dict
from traceanalyzer.analysis.job_reduce import analyze_summaries, intersect, reduce_trace
from traceanalyzer.analysis.job_scale import distributions, step_drift
from traceanalyzer.analysis.window import choose_window
from traceanalyzer.ingest import load

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _both(paths: list[Path]) -> tuple[object, object]:
    traces = [load(p, use_cache=False) for p in paths]
    old = analyze_job(choose_window(combine(traces), "steps"), rules=False)
    new = analyze_summaries([reduce_trace(choose_window(t, "steps")) for t in traces])
    return old, new


def _same(old: object, new: object) -> None:
    a = old.ranks.drop("window_kind")  # type: ignore[attr-defined]
    b = new.ranks.select(a.columns)  # type: ignore[attr-defined]
    # floats to the last bit: a percentage may be computed from an Int64 or a Float64 sum
    assert_frame_equal(a, b, check_exact=False, rel_tol=1e-12, check_dtypes=False)
    assert old.collectives.equals(new.collectives)  # type: ignore[attr-defined]
    assert old.stragglers == new.stragglers  # type: ignore[attr-defined]
    assert old.unmatched_collectives == new.unmatched_collectives  # type: ignore[attr-defined]


def test_reduced_equals_combined(tmp_path: Path) -> None:
    old, new = _both(
        [rank_trace(tmp_path / "a.json", 0, [0] * 5), rank_trace(tmp_path / "b.json", 1, [300] * 5)]
    )
    _same(old, new)
    assert new.stragglers == [1] and new.result is None  # type: ignore[attr-defined]
    assert new.ranks["window_kind"].to_list() == ["steps", "steps"]  # type: ignore[attr-defined]
    [s] = new.scale.stragglers  # type: ignore[attr-defined]
    # rank 0 waits 300 µs in each of the 5 all-reduces rank 1 started last
    assert s["cost_ns"] == 5 * 300_000 and s["late_steps"] == 5 and s["late_share"] == 1.0
    json.dumps(job_to_dict(new), allow_nan=False)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind", ["torch/ddp_gpt_train_rank{}.json.gz", "nsys/ddp_gpt_train_rank{}.sqlite.gz"]
)
def test_reduced_equals_combined_on_real_ddp(kind: str) -> None:
    paths = [SAMPLES / "holdout" / kind.format(r) for r in (0, 1)]
    if not all(p.is_file() for p in paths):
        pytest.skip("held-out DDP traces missing")
    old, new = _both(paths)
    _same(old, new)
    assert new.ranks["exposed_transfer_ns"].to_list() == old.ranks["exposed_transfer_ns"].to_list()  # type: ignore[attr-defined]


def test_intersect() -> None:
    a = pl.DataFrame({"rank": [0, 0, 1], "start_ns": [0, 20, 0], "end_ns": [10, 30, 5]})
    b = pl.DataFrame({"rank": [0, 1], "start_ns": [5, 10], "end_ns": [25, 20]})
    got = intersect(a, b, ["rank"]).sort("rank", "start_ns")
    assert got.rows() == [(0, 5, 10), (0, 20, 25)]


def _host_trace(path: Path, rank: int, host: str, late_us: list[float]) -> Path:
    b = KinetoBuilder()
    b.top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 4}
    b.top["hostname"] = host
    t = 1_000_000.0
    for s, late in enumerate(late_us):
        b.step(s, t, 1_000)
        b.launch("sm90_xmma_gemm_f32f32_tf32", t + 10, 5, t + 20, 300)
        start = t + 400 + late
        b.launch(NCCL, t + 390, 5, start, t + 900 - start, stream=20, api="ncclAllReduce")
        t += 1_000
    return b.write(path)


def test_slow_host_and_growing_skew(tmp_path: Path) -> None:
    """Ranks 2 and 3 (host b) take turns being 300 µs late: neither rank is the straggler, their
    host is. Then a 2-rank job whose skew grows step by step."""
    paths = [
        _host_trace(tmp_path / "r0.json", 0, "a", [0] * 6),
        _host_trace(tmp_path / "r1.json", 1, "a", [0] * 6),
        _host_trace(tmp_path / "r2.json", 2, "b", [300, 0] * 3),
        _host_trace(tmp_path / "r3.json", 3, "b", [0, 300] * 3),
    ]
    job = analyze_summaries([reduce_trace(load(p, use_cache=False)) for p in paths])
    assert job.stragglers == []
    assert job.ranks["host"].to_list() == ["a", "a", "b", "b"]
    hosts = job.scale.hosts
    assert hosts["host"].to_list() == ["b", "a"] and hosts["late_share"].to_list() == [1.0, 0.0]
    [s] = job.scale.stragglers
    assert s["kind"] == "host" and s["host"] == "b" and s["ranks"] == [2, 3]
    # ranks 0 and 1 wait 300 µs in each of the 6 steps
    assert s["cost_ns"] == 2 * 6 * 300_000 and s["late_steps"] == 6
    assert any(f["kind"] == "straggler-host" for f in job.scale.findings)

    growing = [
        _host_trace(tmp_path / "g0.json", 0, "a", [0] * 6),
        _host_trace(tmp_path / "g1.json", 1, "a", [0, 40, 80, 120, 160, 200]),
    ]
    job = analyze_summaries([reduce_trace(load(p, use_cache=False)) for p in growing])
    g = job.scale.skew_growth
    assert g.height == 1 and g["growth_ns_per_step"][0] == pytest.approx(40_000)
    assert any(f["kind"] == "skew-growth" for f in job.scale.findings)


def test_distributions_flag_the_outlier() -> None:
    ranks = pl.DataFrame(
        {"rank": list(range(10)), "span_ns": [100] * 9 + [180], "busy_pct": [50.0] * 10}
    )
    d = {r["metric"]: r for r in distributions(ranks).to_dicts()}
    assert d["span_ns"]["outlier_ranks"] == [9] and d["span_ns"]["max"] == 180
    assert d["span_ns"]["p50"] == 100 and d["busy_pct"]["outliers"] == 0


def test_step_drift_is_relative_to_the_job() -> None:
    rows = []
    for rank in range(4):
        for step in range(6):
            slow = 50_000 * step if rank == 3 else 0
            rows.append({"rank": rank, "step": step, "duration_ns": 1_000_000 + slow})
    drift = step_drift(pl.DataFrame(rows))
    assert drift["rank"].to_list() == [3]
    # 250 µs more over the window, of its median step of 1.125 ms
    assert drift["drift_pct"][0] == pytest.approx(100 * 250 / 1125)
