"""Multi-rank jobs: rank assignment, collective matching, lateness, skew and stragglers."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from tests.support.kineto_builder import KinetoBuilder
from tests.support.paths import PUBLIC, SAMPLES
from traceanalyzer.analysis.job import analyze_job, combine, job_to_dict, load_job
from traceanalyzer.ingest import load

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def rank_trace(path: Path, rank: int | None, late_us: list[float], steps: int = 5,
               extra_collective: bool = False) -> Path:
    """One rank of a data-parallel job: per step a GEMM, then an all-reduce.

    The all-reduce of step s starts ``late_us[s]`` late on this rank and, as NCCL kernels do,
    ends when the last rank has joined, at the same time on every rank.
    """
    b = KinetoBuilder()
    if rank is not None:
        b.top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    t = 1_000_000.0  # µs; both ranks share one clock, as Kineto's epoch timestamps do
    for s in range(steps):
        b.step(s, t, 1_000)
        b.launch("sm90_xmma_gemm_f32f32_tf32", t + 10, 5, t + 20, 300)
        start = t + 400 + late_us[s]
        b.launch(NCCL, t + 390, 5, start, t + 900 - start, stream=20, api="ncclAllReduce")
        t += 1_000
    if extra_collective:
        b.launch(NCCL, t + 10, 5, t + 20, 50, stream=20)
    return b.write(path)


def test_known_straggler(tmp_path: Path) -> None:
    f0 = rank_trace(tmp_path / "a.json", 0, [0] * 5)
    f1 = rank_trace(tmp_path / "b.json", 1, [300] * 5)
    job = analyze_job(load_job([f0, f1], use_cache=False), rules=False)
    assert job.stragglers == [1]
    ranks = {r["rank"]: r for r in job.ranks.to_dicts()}
    assert set(ranks) == {0, 1}
    assert ranks[1]["straggler"] and not ranks[0]["straggler"]
    assert ranks[1]["lateness_mean_ns"] == 300_000 and ranks[0]["lateness_mean_ns"] == 0
    assert ranks[1]["late_count"] == 5 and ranks[1]["late_share"] == 1.0
    # HTA counts iterations > 0: steps 1..4
    assert ranks[1]["hta_late_iterations"] == 4 and ranks[0]["hta_late_iterations"] == 0
    assert ranks[0]["source"] == str(f0) and ranks[1]["source"] == str(f1)
    # collective skew: every instance is 300 µs apart, rank 1 last
    assert job.collectives.height == 5 and job.unmatched_collectives == 0
    assert job.collectives["skew_ns"].to_list() == [300_000] * 5
    assert job.collectives["latest_rank"].to_list() == [1] * 5
    assert job.collectives["step"].to_list() == [0, 1, 2, 3, 4]
    # the punctual rank waits inside its all-reduce: more exposed communication
    assert ranks[0]["communication_ns"] == 5 * 500_000
    assert ranks[1]["communication_ns"] == 5 * 200_000
    assert ranks[0]["exposed_communication_ns"] == ranks[0]["communication_ns"]
    doc = job_to_dict(job)
    json.dumps(doc, allow_nan=False)
    assert doc["stragglers"] == [1]
    assert doc["collective_skew"]["skew_max_ns"] == 300_000
    assert doc["analysis"]["ranks"] is not None and len(doc["analysis"]["ranks"]) == 2


def test_jitter_is_not_a_straggler(tmp_path: Path) -> None:
    f0 = rank_trace(tmp_path / "a.json", 0, [3, 0, 4, 0, 2])
    f1 = rank_trace(tmp_path / "b.json", 1, [0, 5, 0, 1, 0])
    job = analyze_job(load_job([f0, f1], use_cache=False), rules=False)
    assert job.stragglers == []
    assert not job.ranks["straggler"].any()
    assert job.collectives["skew_ns"].to_list() == [3_000, 5_000, 4_000, 1_000, 2_000]


def test_ranks_from_file_names_and_unmatched(tmp_path: Path) -> None:
    # no distributed info: both traces say rank 0, so the rank in the file name decides
    f1 = rank_trace(tmp_path / "job_rank_1.json", None, [250] * 5, extra_collective=True)
    f0 = rank_trace(tmp_path / "job_rank_0.json", None, [0] * 5)
    trace = load_job([f1, f0], use_cache=False)
    assert trace.meta.extra["job"]["traces"][0] == {"path": str(f1), "ranks": [1],
                                                    "recorded_ranks": [0]}
    job = analyze_job(trace, rules=False)
    assert job.stragglers == [1]
    assert job.unmatched_collectives == 1
    assert any("not found on every rank" in w for w in job.warnings)


def test_combine_aligns_epoch_offsets(tmp_path: Path) -> None:
    a = load(rank_trace(tmp_path / "a.json", 0, [0] * 5), use_cache=False)
    b = load(rank_trace(tmp_path / "b.json", 1, [0] * 5), use_cache=False)
    a.meta = replace(a.meta, time_base_ns=1_000)
    b.meta = replace(b.meta, time_base_ns=5_000)
    merged = combine([a, b])
    assert merged.meta.time_base_ns == 1_000
    starts = merged.gpu.group_by("rank").agg(pl.col("start_ns").min()).sort("rank")
    assert starts["start_ns"].to_list() == [a.gpu["start_ns"].min(), b.gpu["start_ns"].min() + 4_000]
    merged.validate()


def test_single_rank_job_warns(tmp_path: Path) -> None:
    job = analyze_job(load_job([rank_trace(tmp_path / "a.json", 0, [0] * 5)], use_cache=False),
                      rules=False)
    assert job.stragglers == [] and job.ranks.height == 1
    assert any("only one rank" in w for w in job.warnings)


def test_cli_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from traceanalyzer.cli.main import main

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    rank_trace(ranks / "r0.json", 0, [0] * 5)
    rank_trace(ranks / "r1.json", 1, [300] * 5)
    out = tmp_path / "job.json"  # not in the folder: the next `job ranks` would read it
    with pytest.raises(SystemExit) as exit_info:
        main(["job", str(ranks), "--json", str(out), "--no-cache", "--no-rules"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "Straggler: rank 1" in text and "300 µs" in text
    assert json.loads(out.read_text())["stragglers"] == [1]


# -- real traces --------------------------------------------------------------------------------


def _nsys_job(name: str):
    path = PUBLIC / "nsys" / name
    if not path.is_file():
        pytest.skip("../shared/traces/public is not available")
    try:
        trace = load(path, use_cache=False)
    except ImportError:
        pytest.skip("the nsys ingest is not available yet")
    return path, analyze_job(trace, rules=False)


def _nccl_starts_from_sqlite(path: Path) -> dict[int, list[int]]:
    """Per process, the start of each NCCL kernel, read straight from the export."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT (k.globalPid >> 24) & 16777215, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%' "
            "ORDER BY k.start").fetchall()
    out: dict[int, list[int]] = {}
    for pid, start in rows:
        out.setdefault(pid, []).append(start)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nsysai_2gpu_sendrecv_before.sqlite",
                                  "nsysai_2gpu_sendrecv_after.sqlite"])
def test_nsys_two_process_job(name: str) -> None:
    path, job = _nsys_job(name)
    assert job.ranks.height == 2
    starts = _nccl_starts_from_sqlite(path)
    assert len(starts) == 2
    a, b = (starts[pid] for pid in sorted(starts))
    n = min(len(a), len(b))
    assert job.collectives.height == n
    expected = [abs(x - y) for x, y in zip(a[:n], b[:n], strict=True)]
    got = job.collectives.sort("ordinal")["skew_ns"].to_list()
    assert got == expected
    assert job.ranks["collectives"].to_list() == [n, n]
    # exposed communication per rank is the rank's own metric
    assert (job.ranks["exposed_communication_ns"] <= job.ranks["communication_ns"]).all()


@pytest.mark.slow
def test_shifted_copy_of_real_kineto_trace() -> None:
    """Rank 1 is the real HTA V100 trace with every NCCL kernel launched 500 µs later."""
    path = PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz"
    if not path.is_file():
        pytest.skip("../shared/traces/public is not available")
    base = load(path, use_cache=False)
    late = 500_000
    comm = pl.col("category") == "communication"
    shifted = replace(base, meta=replace(base.meta, rank=0), gpu=base.gpu.with_columns(
        start_ns=pl.when(comm).then(pl.col("start_ns") + late).otherwise(pl.col("start_ns")),
        end_ns=pl.when(comm).then(pl.col("end_ns") + late).otherwise(pl.col("end_ns")),
    ))
    original = replace(base, meta=replace(base.meta, rank=1))
    job = analyze_job(combine([original, shifted]), rules=False)
    # the shifted copy claims rank 0 and is the late one
    assert job.stragglers == [0]
    assert job.collectives.height == base.gpu.filter(comm).height
    assert set(job.collectives["skew_ns"].to_list()) == {late}
    row = job.ranks.filter(pl.col("rank") == 0).row(0, named=True)
    assert row["lateness_mean_ns"] == late and row["late_share"] == 1.0


def test_batch_job_section_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from traceanalyzer.batch import run_batch
    from traceanalyzer.cli.main import main

    folder = tmp_path / "in"
    folder.mkdir()
    rank_trace(folder / "r0.json", 0, [0] * 5)
    rank_trace(folder / "<b>r1.json", 1, [300] * 5)
    (folder / "broken.json").write_text('{"traceEvents": 5}')
    result = run_batch([folder], tmp_path / "out", workers=2, use_cache=False, rules=False,
                       job=True)
    assert result.failed == 1 and result.job is not None and result.job.stragglers == [1]
    index = (tmp_path / "out" / "index.html").read_text()
    assert '<section id="job">' in index and "Straggler: rank 1" in index
    assert "<b>" not in index and "&lt;b&gt;r1.json" in index
    doc = json.loads((tmp_path / "out" / "job.json").read_text())
    assert doc["stragglers"] == [1] and len(doc["ranks"]) == 2

    page = tmp_path / "job.html"
    with pytest.raises(SystemExit) as exit_info:
        main(["job", str(folder / "r0.json"), str(folder / "<b>r1.json"), "--html", str(page),
              "--no-cache", "--no-rules"])
    assert exit_info.value.code == 0
    html = page.read_text()
    assert "Straggler: rank 1" in html and "<b>" not in html
    # one script, the table sorter, allowed by its hash alone
    assert html.count("<script") == 1 and 'class="sortable"' in html
    assert "script-src" in html and "sha256-" in html


@pytest.mark.slow
def test_traces_of_different_jobs_are_flagged() -> None:
    """The two public HTA traces are rank 3 of an 8-rank A100 job and rank 1 of a 2-rank V100
    job, recorded days apart: they must not produce a straggler verdict."""
    paths = [PUBLIC / "kineto" / "hta_a100_rank3of8_control.json.gz",
             PUBLIC / "kineto" / "hta_v100_rank_of2_test.json.gz"]
    if not all(p.is_file() for p in paths):
        pytest.skip("../shared/traces/public is not available")
    job = analyze_job(load_job(paths, use_cache=False), rules=False)
    assert job.ranks["rank"].to_list() == [1, 3]  # the ranks the traces record
    assert job.stragglers == []
    assert any("does not overlap in time" in w for w in job.warnings)
    assert any("different world sizes ([2, 8])" in w for w in job.warnings)


@pytest.mark.slow
def test_collectives_seen_by_one_rank_before_profiling_do_not_shift_the_matching() -> None:
    """The held-out DDP run: rank 0's trace starts with four all-reduces of the step before
    profiling (no launch recorded), which end before rank 1 recorded any collective. Counted,
    they shifted rank 0's ordinals in the first step against rank 1's (4 unmatched, skews of
    30+ ms, rank 1 named the straggler); left out, all 42 collectives pair up."""
    paths = [SAMPLES / "holdout" / "torch" / f"ddp_gpt_train_rank{r}.json.gz" for r in (0, 1)]
    if not all(p.is_file() for p in paths):
        pytest.skip("held-out DDP traces missing")
    job = analyze_job(combine([load(p) for p in paths]), rules=False)
    assert job.unmatched_collectives == 0 and not job.warnings
    assert job.collectives.height == 42
    assert job.collectives["skew_ns"].max() < 5_000_000
    late = job.collectives.group_by("step").agg(pl.col("latest_rank").mode().first()).sort("step")
    assert late["latest_rank"].to_list() == [1, 1, 0]  # rank 1 late in steps 2-3, rank 0 in 4
    assert job.stragglers == []
