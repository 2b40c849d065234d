"""sync-memcpy on small synthetic traces."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from tests.support.paths import PUBLIC, SAMPLES
from tests.support.synth import US, Synth, busy_loop, run
from traceanalyzer import analyze, load


def test_sync_memcpy_fires_on_blocking_copies_only():
    s = Synth()
    busy_loop(s, n=5)
    s.api("cudaMemcpy", 1100, 400)
    f = run(s)[0]["sync-memcpy"]
    assert f.impact_ns == 400 * US and "cudaMemcpy" in f.message
    s = Synth()
    busy_loop(s, n=5)
    s.api("cudaMemcpyAsync", 1100, 400)
    s.api("cudaMemsetAsync", 1500, 40)
    assert "sync-memcpy" not in run(s)[0]


# --- what it says about CPU activity holds for the trace (issue 37) -----------------------------

CPU_ONLY = PUBLIC / "kineto" / "hta_cpu_only.json.gz"  # 4 aten ops, all after its one step
BERT = SAMPLES / "holdout" / "torch" / "bert_fp32_train.json.gz"


def _reason(result, slug="sync-memcpy") -> str:
    outcome = next(o for o in result.rule_outcomes if o.slug == slug)
    assert outcome.status == "not_applicable"
    return outcome.reason


@pytest.mark.skipif(not CPU_ONLY.exists(), reason="public traces absent")
def test_cpu_only_trace_is_not_said_to_have_no_cpu_activity():
    trace = load(CPU_ONLY, use_cache=False)
    assert trace.cpu.height == 4  # the trace has CPU activity: never "no CPU activity"
    steady = analyze(CPU_ONLY, use_cache=False)
    reason = _reason(steady)
    assert "no CPU activity" not in reason
    # Measured: the window (its one step) holds none of the 4 operators, which come after it.
    assert steady.window.captured_rows["cpu"] == 4
    # Checked on the frames: the 4 rows are aten::empty operators after the step's end, and the
    # trace records no runtime calls; the reason says both.
    step = trace.annotations.filter(pl.col("kind") == "step")
    assert (trace.cpu["start_ns"] >= step["end_ns"].max()).all()
    assert trace.cpu["name"].unique().to_list() == ["aten::empty"]
    assert reason == (
        "the analyzed window holds no CPU operators or runtime calls: the capture's 4 CPU "
        "events (4 operators, no runtime calls) lie outside it; --window all analyzes them"
    )
    whole = analyze(CPU_ONLY, window="all", use_cache=False)
    assert _reason(whole) == (
        "the analyzed window holds no CUDA/HIP runtime or driver calls "
        "(its CPU events: 4 framework operators)"
    )


@pytest.mark.skipif(not CPU_ONLY.exists(), reason="public traces absent")
def test_cpu_only_trace_rules_on_gpu_work_say_there_is_none():
    # The rules that judge GPU kernels say the trace has none, in any window, not that shapes,
    # grid sizes or a peak are missing, nor that --window all would make them run.
    for window in ("steps", "all"):
        result = analyze(CPU_ONLY, window=window, use_cache=False)
        for slug in ("gemm-below-roofline", "memory-bound-below-bandwidth", "small-grid"):
            assert _reason(result, slug) == "the trace has no GPU activity", (window, slug)


@pytest.mark.skipif(not BERT.exists(), reason="holdout traces absent")
def test_a_real_trace_without_runtime_calls_gets_a_measured_reason(tmp_path):
    # The held-out BERT run with its CUDA runtime calls and GPU events taken out: framework
    # operators and user ranges only, as a CPU-side capture records them.
    doc = json.loads(gzip.decompress(BERT.read_bytes()))
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if str(e.get("cat", "")).lower() in ("cpu_op", "user_annotation")
    ]
    path = tmp_path / "bert_cpu_side.json"
    path.write_text(json.dumps(doc))
    result = analyze(path, use_cache=False)
    ops = result.window.captured_rows["cpu"]
    assert ops > 0
    reason = _reason(result)
    in_window = int(
        reason.split("its CPU events: ")[1].split(" framework operators")[0].replace(",", "")
    )
    assert 0 < in_window <= ops
    assert reason.startswith("the analyzed window holds no CUDA/HIP runtime or driver calls")
