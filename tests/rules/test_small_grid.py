"""small-grid on small synthetic traces."""

from __future__ import annotations

from tests.support.synth import US, Synth, busy_loop, run


def test_small_grid_fires_and_needs_sm_count():
    def build(grid: tuple[int, int, int], sms: int | None) -> Synth:
        s = Synth(sm_count=sms)
        busy_loop(s, n=2)
        for i in range(8):
            s.kernel("my_reduce_kernel", 500 + i * 102, 100, launch=400, grid=grid)
        return s

    findings, _ = run(build((4, 1, 1), 132))
    f = findings["small-grid"]
    assert "my_reduce_kernel with 4 blocks" in f.message and "132 SMs" in f.message
    assert f.impact_ns == int(800 * US * (1 - 4 / 132))
    assert "small-grid" not in run(build((264, 1, 1), 132))[0]
    _, outcomes = run(build((4, 1, 1), None))
    assert outcomes["small-grid"].status == "not_applicable"
    assert "SM count" in outcomes["small-grid"].reason


def test_small_grid_judges_a_kernel_by_its_typical_launch():
    # A multi-tensor optimizer kernel: full chunks of 90 blocks and a short last one of 20.
    s = Synth()
    for i in range(10):
        s.kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor>", i * 102, 100, launch=0,
                 grid=(90 if i % 5 else 20, 1, 1))
    assert "small-grid" not in run(s)[0]
