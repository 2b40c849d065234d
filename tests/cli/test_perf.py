"""``analyze --peak-tflops/--peak-bandwidth/--tokens-per-step/--flops-per-step``
(traceanalyzer/cli/perf.py) on a real H200 recording."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run_cli
from tests.support.paths import SAMPLES

GPT = SAMPLES / "programs" / "torch" / "gpt_fp32_torch.json.gz"


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    if not GPT.is_file():
        pytest.skip("the program recordings are not in this checkout")
    out = tmp_path_factory.mktemp("perf")
    plain, given = out / "plain.json", out / "given.json"
    for path, extra in (
        (plain, []),
        (given, ["--peak-tflops", "100", "--peak-bandwidth", "1000", "--tokens-per-step", "4096"]),
    ):
        done = run_cli(
            "analyze", str(GPT), "--no-cache", "--no-rules", "-qq", "--json", str(path), *extra
        )
        assert done.returncode == 0, done.stderr
    return json.loads(plain.read_text()), json.loads(given.read_text())


def test_mfu_against_the_device_peak_or_the_given_one(docs):
    plain, given = docs
    m = plain["metrics"]
    assert m["flops_per_step"] == pytest.approx(1333587345408, rel=0.05)  # FlopCounterMode
    assert m["peak_name"] == "H200 SXM dense BF16" and m["peak_tflops"] == 989.4
    assert m["mfu_pct"] == pytest.approx(100 * m["achieved_tflops"] / 989.4, abs=1e-3)
    assert m["tokens_per_s"] is None
    g = given["metrics"]
    assert g["peak_tflops"] == 100 and g["peak_name"] == "--peak-tflops"
    assert g["mfu_pct"] == pytest.approx(g["achieved_tflops"], abs=1e-3)
    assert g["tokens_per_s"] == pytest.approx(4096 / (m["step_time_p50_ns"] / 1e9), rel=1e-4)
    assert given["roofline"]["bandwidth_gbps"] == 1000
    ops = plain["roofline"]["operators"]
    assert ops and all(r["lost_ns"] >= 0 for r in ops)
    assert {r["bound"] for r in ops} <= {"compute", "memory"}


def test_bad_peak_is_a_usage_error():
    done = run_cli("analyze", str(GPT), "--peak-tflops", "-5")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "--peak-tflops" in done.stderr
