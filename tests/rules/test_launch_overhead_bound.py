"""launch-overhead-bound on small synthetic traces."""

from __future__ import annotations

import pytest

from tests.support.paths import SAMPLES
from tests.support.synth import US, Synth, run


def test_launch_overhead_bound_fires_on_tiny_kernels_launched_late():
    s = Synth()
    s.step(0, 0, 2000)
    for i in range(60):
        # 3 µs kernels, each launched 20 µs after the previous one started: the GPU waits
        s.kernel("vectorized_elementwise_kernel", 10 + i * 25, 3, launch=5 + i * 25)
    findings, _ = run(s)
    f = findings["launch-overhead-bound"]
    assert "1 of 1 step launched 60 kernels" in f.message
    assert f.impact_ns == 59 * 22 * US


def test_launch_overhead_bound_quiet_when_queued_ahead():
    s = Synth()
    s.step(0, 0, 2000)
    for i in range(60):
        s.kernel("vectorized_elementwise_kernel", 400 + i * 4, 3, launch=5 + i * 5)
    assert "launch-overhead-bound" not in run(s)[0]


def test_without_steps_the_message_speaks_of_the_window_not_of_one_step():
    s = Synth()
    for i in range(60):
        s.kernel("vectorized_elementwise_kernel", 10 + i * 25, 3, launch=5 + i * 25)
    findings, _ = run(s)
    f = findings["launch-overhead-bound"]
    assert f.message.startswith("The window (no steps found) launched 60 kernels, ")
    assert "1 of 1 step" not in f.message


GPT_FP16 = SAMPLES / "programs" / "torch" / "gpt_fp16_torch.json.gz"  # one of its 6 steps flagged


@pytest.mark.skipif(not GPT_FP16.exists(), reason="sample traces absent")
def test_one_flagged_step_of_several_is_named_not_each():
    # Read "1 of 6 steps launched 398 kernels each": one step, named, launches its kernels.
    from traceanalyzer import analyze

    f = {f.slug: f for f in analyze(GPT_FP16, use_cache=False).findings}["launch-overhead-bound"]
    step = f.evidence[0]["step"]
    assert f.message.startswith(f"1 of 6 steps (step {step}) launched 398 kernels, ")
    assert "each" not in f.message.split(",")[0]
