"""A 64-rank job made from a real trace, on a Dask LocalCluster and on the local pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import SAMPLES, bench_module
from traceanalyzer.analysis.job import job_to_dict
from traceanalyzer.batch.job import run_job
from traceanalyzer.report.jsonout import dumps

SOURCE = SAMPLES / "holdout" / "torch" / "ddp_gpt_train_rank0.json.gz"
RANKS = 64
LATE = 37


@pytest.mark.slow
def test_dask_and_local_give_the_same_job(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    if not SOURCE.is_file():
        pytest.skip("held-out DDP trace missing")
    # 64 copies of a real DDP rank, 8 per host, NCCL kernels 0-21 µs late by rank, rank 37's
    # 500 µs late; plus one file that is no trace
    paths = bench_module("job", "bench_job").make_job(
        tmp_path / "ranks", RANKS, source=SOURCE, late_rank=LATE, broken=1
    )
    cache = tmp_path / "cache"
    local = run_job(paths, workers=2, rules=False, cache_dir=cache)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        on_dask = run_job(paths, dask=cluster.scheduler_address, rules=False, cache_dir=cache)
    assert dumps(job_to_dict(on_dask)) == dumps(job_to_dict(local))
    assert on_dask.ranks.equals(local.ranks)

    job = on_dask
    assert job.ranks.height == RANKS and job.unmatched_collectives == 0
    assert [f["path"] for f in job.failed] == [str(paths[-1])]
    assert job.stragglers == [LATE]
    assert job.ranks.filter(job.ranks["rank"] == LATE)["host"].item() == "node004"
    assert job.scale.hosts.height == RANKS // 8
    [straggler] = job.scale.stragglers
    assert straggler["kind"] == "rank" and straggler["host"] == "node004"
    assert straggler["late_share"] == 1.0 and straggler["cost_per_rank_ns"] > 400_000
    lateness = {d["metric"]: d for d in job.scale.distributions.to_dicts()}["lateness_mean_ns"]
    assert lateness["outlier_ranks"] == [LATE] and lateness["max"] >= 500_000
    assert any("could not be loaded" in w for w in job.warnings)
