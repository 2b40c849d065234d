"""small-batch-matmul on small synthetic traces."""

from __future__ import annotations

import pytest

from tests.support.synth import US, Synth, busy_loop, run

NVJET_SMALL = "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_NNT"  # what cuBLAS ran for M = 1 on an H200


def _weight_matmuls(s: Synth, m: int, n: int = 8192, k: int = 8192, op: str = "aten::mm",
                    calls: int = 5, dur: float = 100) -> None:
    for i in range(calls):
        s.op(op, i * 120, 10, ext=i + 1, dims=[[m, k], [k, n]], types=["c10::BFloat16"] * 2)
        s.kernel(NVJET_SMALL, i * 120 + 15, dur, ext=i + 1, launch=i * 120 + 2)


def test_small_batch_matmul_fires_on_one_row_against_a_large_weight():
    s = Synth()
    _weight_matmuls(s, m=1)
    f = run(s)[0]["small-batch-matmul"]
    assert f.impact_ns == pytest.approx(5 * 100 * US * 15 / 16)  # all but 1/16 saved per row
    assert "5 matrix multiplies of a weight with at most 1 row of activations" in f.message
    assert "aten::mm with M=1 N=8192 K=8192 (~1.0 FLOP per byte moved)" in f.message
    assert f.evidence[0]["rows"] == 1 and f.evidence[0]["calls"] == 5


@pytest.mark.parametrize("case", ["batch of 32", "small weight", "bmm", "few rows of 16"])
def test_small_batch_matmul_quiet_where_batching_would_not_pay(case):
    s = Synth()
    if case == "batch of 32":
        _weight_matmuls(s, m=32)
    elif case == "small weight":  # 512 x 512: launch latency, not the weight's read
        _weight_matmuls(s, m=1, n=512, k=512)
    elif case == "bmm":  # both matrices are activations (attention at decode): no weight to share
        _weight_matmuls(s, m=1, op="aten::bmm")
    else:  # 16 rows is the target: nothing to gain
        _weight_matmuls(s, m=16)
    assert "small-batch-matmul" not in run(s)[0]


@pytest.mark.parametrize(("kernel", "rows"), [
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 128, "
     "16, 4, 4, false, false>", 1),
    (NVJET_SMALL, 8),
    ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_bias_TNN", 8),
])
def test_small_batch_matmul_by_kernel_name_without_shapes(kernel, rows):
    s = Synth()
    busy_loop(s, n=5, dur=100, name=kernel)
    f = run(s)[0]["small-batch-matmul"]
    assert f.impact_ns == pytest.approx(5 * 100 * US * (1 - rows / 16))
    assert f"at most {rows} row" in f.message and "(by its name)" in f.message


@pytest.mark.parametrize("case", ["large tile", "short kernels"])
def test_small_batch_matmul_by_name_quiet(case):
    s = Synth()
    if case == "large tile":
        busy_loop(s, n=5, dur=100, name="nvjet_sm90_tst_128x32_64x10_2x1_v_bz_NNT")
    else:  # 3 µs: launch latency, whatever the rows (launch_bound's CUDA graph)
        busy_loop(s, n=50, dur=3, name=NVJET_SMALL)
    assert "small-batch-matmul" not in run(s)[0]
