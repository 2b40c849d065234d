"""sample_traces/manifest.yaml: schema, files present, and agreement with the run records.

(Whether the analyzer's findings match must_fire / must_not_fire is tested with the rules.)
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO
from traceanalyzer.rules import builtin_slugs
from traceanalyzer.workloads import WORKLOADS
from traceanalyzer.workloads.manifest import build_manifest, expectations

ROOT = REPO / "sample_traces"
KEYS = ("path", "workload", "variant", "device", "profiler", "step_ms", "speedup", "must_fire",
        "must_not_fire")


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load((ROOT / "manifest.yaml").read_text())


def test_every_entry_has_the_keys_and_valid_values(manifest: dict) -> None:
    traces = manifest["traces"]
    assert len(traces) >= 40
    for t in traces:
        assert all(k in t for k in KEYS), t
        assert t["workload"] in WORKLOADS
        assert t["variant"] in WORKLOADS[t["workload"]].variants
        assert t["profiler"] in ("torch", "nsys")
        assert t["device"] == "NVIDIA H200"
        assert t["step_ms"] > 0
        assert set(t["must_fire"]) <= set(builtin_slugs()), t["path"]
        assert set(t["must_not_fire"]) <= set(builtin_slugs()), t["path"]
        assert not set(t["must_fire"]) & set(t["must_not_fire"]), t["path"]
        assert (ROOT / t["path"]).is_file(), t["path"]
    assert len({t["path"] for t in traces}) == len(traces)


def test_every_pair_has_both_profilers(manifest: dict) -> None:
    have = {(t["workload"], t["variant"], t["profiler"], t.get("rank")) for t in manifest["traces"]}
    not_run = {n["workload"] for n in manifest["not_run"]}
    for name, info in WORKLOADS.items():
        if name in not_run:
            continue
        # a multi-GPU workload has one trace per rank, named <workload>_<variant>_rank<r>
        ranks = range(info.min_gpus) if info.min_gpus > 1 else (None,)
        for variant in info.variants:
            for prof in ("torch", "nsys"):
                for rank in ranks:
                    assert (name, variant, prof, rank) in have, (name, variant, prof, rank)


def test_multi_rank_entries_name_their_rank(manifest: dict) -> None:
    multi = [t for t in manifest["traces"] if "rank" in t]
    assert {t["workload"] for t in multi} == {n for n, w in WORKLOADS.items() if w.min_gpus > 1}
    for t in multi:
        assert t["world_size"] >= WORKLOADS[t["workload"]].min_gpus
        assert Path(t["path"]).name.split(".")[0].endswith(f"_rank{t['rank']}"), t["path"]
        rec = json.loads((ROOT / "records" / f"{Path(t['path']).name.split('.')[0]}."
                          f"{t['profiler']}.record.json").read_text())
        assert (rec["rank"], rec["world_size"], rec["step_ms"]) == (
            t["rank"], t["world_size"], t["step_ms"])


def test_bad_traces_name_their_rule_and_good_twins_exclude_it(manifest: dict) -> None:
    for t in manifest["traces"]:
        info = WORKLOADS[t["workload"]]
        if t["variant"] == "bad" or t["variant"] in info.still_bad:
            if t["profiler"] == "torch":
                assert set(t["must_fire"]) == set(info.rules)
            assert set(t["must_fire"]) >= set(info.rules) - set(info.torch_only_rules)
        else:
            assert set(t["must_not_fire"]) == set(info.rules)
            assert t["must_fire"] == []
        assert (t["must_fire"], t["must_not_fire"]) == expectations(
            t["workload"], t["variant"], t["profiler"])


def test_every_fix_was_measured_faster(manifest: dict) -> None:
    for t in manifest["traces"]:
        assert t["speedup"] is not None and t["speedup"] > 1.05, t["path"]


def test_manifest_is_what_the_generator_makes_from_the_records(manifest: dict) -> None:
    assert build_manifest(ROOT) == {k: v for k, v in manifest.items()}


def test_records_carry_device_and_versions() -> None:
    recs = sorted((ROOT / "records").glob("*.record.json"))
    assert recs
    for p in recs:
        rec = json.loads(p.read_text())
        assert rec["device"]["sm_count"] == 132
        assert rec["versions"]["torch"].startswith("2.")
        assert rec["timed_steps"] >= 5


def test_nsys_traces_are_plain_sqlite_with_reference_csvs(manifest: dict) -> None:
    for t in manifest["traces"]:
        if t["profiler"] != "nsys":
            continue
        path = ROOT / t["path"]
        assert path.read_bytes()[:16] == b"SQLite format 3\x00"
        assert path.stat().st_size < 5 * 2**20
        csvs = {p.name for p in path.with_suffix("").glob("*.csv")}
        for report in ("stats_cuda_gpu_kern_sum", "stats_cuda_api_sum", "stats_nvtx_sum",
                       "analyze_gpu_gaps", "analyze_cuda_api_sync"):
            assert f"{report}.csv" in csvs, (t["path"], report)


def test_nsys_traces_hold_five_nvtx_steps_and_gpu_work(manifest: dict) -> None:
    for t in manifest["traces"]:
        if t["profiler"] != "nsys":
            continue
        con = sqlite3.connect(f"file:{ROOT / t['path']}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master")}
            steps = con.execute(
                "select count(*) from NVTX_EVENTS n left join StringIds s on n.textId = s.id "
                "where coalesce(n.text, s.value) like 'ProfilerStep#%'").fetchone()[0]
            assert steps == 5, t["path"]
            if t["path"].endswith("graphlevel.sqlite"):
                assert "CUPTI_ACTIVITY_KIND_KERNEL" not in tables
                assert "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables
            else:
                n = con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
                assert n >= 5, t["path"]
        finally:
            con.close()


def test_torch_traces_are_gzipped_kineto_with_three_steps(manifest: dict) -> None:
    for t in manifest["traces"]:
        if t["profiler"] != "torch":
            continue
        with gzip.open(ROOT / t["path"], "rt") as fh:
            doc = json.load(fh)
        names = {e.get("name") for e in doc["traceEvents"] if e.get("cat") == "user_annotation"
                 or str(e.get("name", "")).startswith("ProfilerStep#")}
        steps = {n for n in names if n and n.startswith("ProfilerStep#")}
        assert len(steps) == 3, (t["path"], steps)
        assert any(e.get("cat") == "kernel" for e in doc["traceEvents"]), t["path"]
        assert doc["deviceProperties"][0]["numSms"] == 132


def test_corpus_stays_small() -> None:
    # the corpus itself, not caches an analysis may have left beside the traces
    files = [p for p in ROOT.rglob("*")
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    assert max(p.stat().st_size for p in files) < 20 * 2**20
    # 42 MiB with the rank_imbalance traces (2026-11-30); 78 MiB with the steady-state, copy-bound
    # and memory recordings of programs/ and Nsight Compute's reports of kernel pairs in ncu/
    # (2026-12-01); 57 MiB once the .ncu-rep and held-out exports were gzipped (2026-12-02).
    # The whole tracked tree must stay under the GPU machine's 64 MiB copy limit, or no
    # recording can be made: gzip new exports (they are read as they are).
    assert sum(p.stat().st_size for p in files) < 60 * 2**20
