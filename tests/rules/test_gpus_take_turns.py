"""gpus-take-turns on small synthetic traces."""

from __future__ import annotations

import polars as pl
import pytest

from tests.support.synth import US, Synth, busy_loop, run


def _split_model(s: Synth, *, pipelined: bool, steps: int = 4, dur: float = 500) -> None:
    """One process, two GPUs, a half of the work each: one after the other, or overlapped (the
    second GPU's half of step i beside the first GPU's half of step i + 1)."""
    for i in range(steps):
        start = i * (dur + 5) if pipelined else i * 2 * (dur + 5)
        s.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", start, dur, device=0, stream=7)
        s.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", start + dur + 5, dur, device=1, stream=7)


def test_gpus_take_turns_fires_when_a_split_model_runs_one_gpu_at_a_time():
    s = Synth()
    _split_model(s, pipelined=False)
    f = run(s)[0]["gpus-take-turns"]
    # busy 4 ms in all, 2 ms on each GPU: side by side the work would take 2 ms less
    assert f.impact_ns == pytest.approx(2000 * US)
    assert "drove 2 GPUs that took turns" in f.message
    assert "only one was busy 100% of the time" in f.message
    assert sorted(row["device"] for row in f.evidence) == [0, 1]


def test_gpus_take_turns_quiet_when_the_gpus_work_side_by_side():
    s = Synth()
    _split_model(s, pipelined=True, steps=12)  # a bubble of one half-step at each end
    assert "gpus-take-turns" not in run(s)[0]


def test_gpus_take_turns_quiet_for_one_gpu_and_for_a_stray_copy():
    s = Synth()
    busy_loop(s, n=20)
    assert "gpus-take-turns" not in run(s)[0]
    # a copy to another GPU now and then does not make a split model
    s.kernel("Memcpy PtoP (Device -> Device)", 5000, 20, device=1, stream=9, kind="memcpy")
    assert "gpus-take-turns" not in run(s)[0]


def test_time_by_busy_count_leaves_touching_intervals_apart():
    from traceanalyzer.rules.detectors.gpus_take_turns import _time_by_busy_count

    merged = pl.DataFrame({"device": [0, 1, 0], "start_ns": [0, 10, 30], "end_ns": [10, 40, 35]})
    by_count = dict(_time_by_busy_count(merged).iter_rows())
    assert by_count == {1: 10 + 20 + 5, 2: 5}  # 0-10 one, 10-30 one, 30-35 two, 35-40 one
