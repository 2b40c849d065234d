"""bench/run.py end to end on tiny inputs: every stage runs and RESULTS.md has the table and targets.

No timing is asserted: this only checks that the benchmark works.
"""

from __future__ import annotations

import json

import pytest

from tests.support.big_trace import seed_trace
from tests.support.paths import PUBLIC, bench_module


@pytest.mark.slow
def test_run_writes_results_with_every_stage(tmp_path):
    run = bench_module("run", "bench_run")
    seed = seed_trace(tmp_path / "seed.json")
    nsys_seed = PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite"
    argv = ["--sizes", "20KB,60KB", "--seed", str(seed), "--out-dir", str(tmp_path / "out"),
            "--results", str(tmp_path / "RESULTS.md"), "--json", str(tmp_path / "r.json"),
            "--no-hta", "--no-batch"]
    if nsys_seed.exists():
        argv += ["--nsys-seed", str(nsys_seed)]
    else:
        argv += ["--no-nsys"]
    run.main(argv)
    raw = json.loads((tmp_path / "r.json").read_text())
    assert [r["size"] for r in raw["rows"]] == ["0.02MB", "0.06MB"]
    for row in raw["rows"]:
        for stage in ("ingest", "ingest_warm", "ingest_gz", "stages", "e2e", "e2e_cached",
                      "cached_load"):
            assert row[stage]["error"] is None, (stage, row[stage]["error"])
            assert row[stage]["peak_rss_mb"] > 0
        assert row["ingest"]["rows"]["gpu"] > 0
        # small traces: the median of several children, each of which timed the ingest
        assert len(row["ingest"]["walls"]) == run.REPEATS and all(row["ingest"]["walls"])
        assert row["ingest_warm"]["wall_s"] > 0
        assert row["stages"]["analysis_s"] is not None
        if nsys_seed.exists():
            assert row["nsys"]["error"] is None and row["nsys"]["rows"]["gpu"] > 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## Kineto JSON" in text and "## Targets" in text
    assert "| 0.06MB |" in text
    assert "Kineto JSON ingest ≥ 200 MB/s" in text
    assert "met" in text or "missed" in text


def test_profile_kineto_prints_each_step(tmp_path, capfd):
    module = bench_module("profile_kineto", "bench_profile")
    assert module.main([str(seed_trace(tmp_path / "seed.json")), "--reads", "2"]) == 0
    out = capfd.readouterr().out
    assert "read 1 of this process" in out and "read 2 of this process" in out
    # A small trace: assembled in C (a bigger one by Polars, in _cpu_and_gpu_frames).
    for step in ("cut ", "_decode_chunk end", "_reduce_group end", "assemble_compiled end"):
        assert step in out


def test_fixed_part_splits_the_smallest_ingest_at_the_big_traces_rate():
    run = bench_module("run", "bench_run")

    def row(size, nbytes, wall, warm=None):
        return {"size": size, "bytes": nbytes, "ingest": {"wall_s": wall},
                "ingest_warm": {"wall_s": warm} if warm else {}}

    # 10 MB in 60 ms, warm 40 ms; the big traces' median is 400 MB/s, where 10 MB takes 25 ms
    rows = [row("10MB", 10e6, 0.060, 0.040), row("100MB", 100e6, 0.25),
            row("1GB", 1e9, 2.5), row("2GB", 2e9, 4.0)]
    text = run.fixed_part(rows)
    assert text.startswith("10MB: 60 ms = 25 ms at the ≥ 100 MB traces' median 400 MB/s + 35 ms")
    assert text.endswith("in a warm process 40 ms = 25 + 15 ms")
    assert run.fixed_part(rows[1:]) is None  # no small trace to split
    assert run.fixed_part(rows[:1]) is None  # no big one to take the rate from
