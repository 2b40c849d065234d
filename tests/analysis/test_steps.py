"""Step times follow what the GPU did, not only the CPU-side step annotation."""

from __future__ import annotations

import polars as pl
import pytest
import yaml

from tests.support.kineto_builder import KinetoBuilder
from tests.support.paths import SAMPLES
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.ingest import load
from traceanalyzer.ingest.kineto import read_kineto

MANIFEST = yaml.safe_load((SAMPLES / "manifest.yaml").read_text()) if (SAMPLES / "manifest.yaml").exists() else {"traces": []}


def test_gpu_bound_steps_take_the_gpu_time(tmp_path):
    """The CPU queues three 1 ms steps in 30 µs; the steps still take 1 ms each."""
    b = KinetoBuilder()
    for i in range(3):
        b.step(i, i * 10, 10)
        b.launch("k", i * 10 + 1, 5, 100 + i * 1000, 1000)
    r = analyze_trace(read_kineto(b.write(tmp_path / "t.json")), rules=False)
    assert r.steps["duration_ns"].to_list()[1:] == [1_000_000, 1_000_000]
    assert r.metrics.step_time_p50_ns == 1_000_000


def test_cpu_bound_steps_take_the_cpu_time(tmp_path):
    b = KinetoBuilder()
    for i in range(3):
        b.step(i, i * 500, 500)
        b.launch("k", i * 500 + 400, 5, i * 500 + 410, 10)
    r = analyze_trace(read_kineto(b.write(tmp_path / "t.json")), rules=False)
    assert r.steps["duration_ns"].to_list()[1:] == [500_000, 500_000]


def pairs():
    by_key = {(t["workload"], t["variant"], t["profiler"]): t for t in MANIFEST["traces"]}
    for (workload, variant, profiler), bad in sorted(by_key.items()):
        good = by_key.get((workload, "good", profiler))
        if variant == "bad" and good:
            yield pytest.param(bad, good, id=f"{workload}-{profiler}")


@pytest.mark.slow
@pytest.mark.parametrize("bad, good", list(pairs()))
def test_bad_twin_has_longer_steps_like_the_measurement(bad, good):
    def p50(entry):
        return analyze_trace(load(SAMPLES / entry["path"], use_cache=False),
                             rules=False).metrics.step_time_p50_ns

    assert p50(bad) > p50(good)


STALL = [SAMPLES / "torch" / f"dataloader_stall_{v}.json.gz" for v in ("bad", "good")]


@pytest.mark.parametrize("path", STALL, ids=lambda p: p.name)
def test_each_step_row_adds_up_to_its_step(path):
    # The data-loader stall traces idle across step edges: a gap was counted whole in the step
    # it started in, so rows read 105% (good, step 3) and 8.9% (bad, step 4). Each gap is now
    # cut at the step edges, and idle before the GPU's first work or after its last is host wait.
    from traceanalyzer.report._common import step_rows

    r = analyze_trace(load(path, use_cache=False), rules=False)
    gaps = r.steps.select(
        total=pl.col("busy_ns") + pl.col("idle_host_wait_ns") + pl.col("idle_kernel_wait_ns")
        + pl.col("idle_other_ns"), d=pl.col("duration_ns"))
    assert (gaps["total"] == gaps["d"]).all()
    for row in step_rows(r)[0]:
        shown = row["busy_pct"] + row["host_wait_pct"] + row["kernel_wait_pct"] + row["other_pct"]
        assert shown == pytest.approx(100, abs=0.01)
