"""bench/make_big_trace.py: tiled traces are valid, keep links unique and ingest like the seed."""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sqlite3

import polars as pl
import pytest

from tests.support.big_trace import seed_trace
from tests.support.paths import PUBLIC, SAMPLES, bench_module
from traceanalyzer.ingest import read_any

mbt = bench_module("make_big_trace")


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_kineto_tiling_repeats_whole_periods_with_unique_ids(tmp_path, suffix):
    seed = seed_trace(tmp_path / "seed.json")
    seed_events = json.loads(seed.read_text())["traceEvents"]
    out = tmp_path / f"big{suffix}"
    info = mbt.tile_kineto(seed, out, 20 * seed.stat().st_size)
    raw = gzip.decompress(out.read_bytes()) if suffix.endswith(".gz") else out.read_bytes()
    assert info["uncompressed_bytes"] == len(raw)
    doc = json.loads(raw)
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H200"
    events = doc["traceEvents"]
    copies = info["copies"]
    assert copies >= 10
    # Metadata once; every other event once per copy (the last copy may be a time window).
    assert sum(e["ph"] == "M" for e in events) == 1
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert (copies - 1) * 6 <= len(kernels) <= copies * 6
    correlations = [e["args"]["correlation"] for e in kernels]
    assert len(set(correlations)) == len(correlations)
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"}
    assert set(correlations) <= launches
    steps = [e["name"] for e in events if e["name"].startswith("ProfilerStep#")]
    assert len(set(steps)) == len(steps)
    flow_ids = [e["id"] for e in events if e["ph"] == "s"]
    assert len(set(flow_ids)) == len(flow_ids)
    # Timestamps: each copy is the seed shifted by a whole period; fractions are kept exactly.
    period = info["period_us"]
    seed_ts = sorted(e["ts"] for e in seed_events if e.get("cat") == "kernel")
    big_ts = sorted(e["ts"] for e in kernels)
    assert big_ts[:6] == seed_ts
    assert big_ts[6:12] == [t + period for t in seed_ts]
    assert any(isinstance(t, float) and t % 1 == 0.5 for t in big_ts)


def test_kineto_tiling_ingests_to_copies_of_the_seed(tmp_path):
    seed = seed_trace(tmp_path / "seed.json")
    out = tmp_path / "big.json"
    info = mbt.tile_kineto(seed, out, 4 * seed.stat().st_size)
    small, big = read_any(seed), read_any(out)
    copies = info["copies"]
    assert copies >= 3
    # Whole copies, plus a last one that may be a time window of the seed.
    assert (copies - 1) * small.gpu.height <= big.gpu.height <= copies * small.gpu.height
    assert (copies - 1) * small.cpu.height <= big.cpu.height <= copies * small.cpu.height
    steps = big.annotations.filter(pl.col("kind") == "step")
    assert (copies - 1) * 3 <= steps.height <= copies * 3
    assert steps["name"].n_unique() == steps.height
    # Each kernel still finds its launch after renumbering.
    assert big.gpu["graph_launched"].null_count() == 0


def test_size_below_the_seed_is_a_time_window(tmp_path):
    seed = seed_trace(tmp_path / "seed.json")
    out = tmp_path / "small.json"
    info = mbt.tile_kineto(seed, out, seed.stat().st_size // 2)
    events = json.loads(out.read_text())["traceEvents"]
    assert info["copies"] == 1
    assert 0 < len(events) < len(json.loads(seed.read_text())["traceEvents"])


def test_parse_size():
    assert mbt.parse_size("10MB") == 10_000_000
    assert mbt.parse_size("1.5GB") == 1_500_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        mbt.parse_size("lots")


def test_nsys_tiling_with_insert_select(tmp_path):
    seed = PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite"
    if not seed.exists():
        pytest.skip("../shared/traces/public is not available")
    local = tmp_path / "seed.sqlite"
    shutil.copy(seed, local)
    out = tmp_path / "big.sqlite"
    info = mbt.tile_nsys(local, out, 4 * local.stat().st_size)
    copies = info["copies"]
    assert copies >= 2
    with sqlite3.connect(local) as a, sqlite3.connect(out) as b:
        q = "SELECT count(*), count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL"
        n, _ = a.execute(q).fetchone()
        m, distinct = b.execute(q).fetchone()
        assert m == copies * n and distinct == m
        span = b.execute("SELECT max(start) - min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        assert span >= (copies - 1) * info["period_ns"]
    small, big = read_any(local), read_any(out)
    assert big.gpu.height == copies * small.gpu.height


def test_nsys_tiling_from_a_gzipped_seed(tmp_path):
    """The held-out exports are kept gzipped: a .sqlite.gz seed is unpacked into the tile, and
    the size aimed at is that of the unpacked export's copies."""
    seed = SAMPLES / "holdout" / "nsys" / "gpt_decode.sqlite.gz"
    out = tmp_path / "big.sqlite"
    unpacked = len(gzip.decompress(seed.read_bytes()))
    info = mbt.tile_nsys(seed, out, 4 * unpacked)
    assert info["copies"] >= 2
    assert out.stat().st_size >= 2 * unpacked
    small, big = read_any(seed), read_any(out)
    assert big.gpu.height == info["copies"] * small.gpu.height
