"""Core metrics on small traces whose answers are known by construction."""

from __future__ import annotations

import polars as pl

from tests.support.kineto_builder import KinetoBuilder
from traceanalyzer.analysis import analyze_trace, intervals
from traceanalyzer.analysis.views import Views
from traceanalyzer.ingest.kineto import read_kineto


def build(tmp_path, builder: KinetoBuilder):
    return read_kineto(builder.write(tmp_path / "t.json"))


def test_idle_causes(tmp_path):
    b = KinetoBuilder()
    b.step(1, 0, 1000)
    b.launch("k1", 1, 2, 10, 100)  # busy 10..110
    b.launch("k2", 5, 2, 120, 100)  # launched long before: 10 µs gap is kernel wait
    b.launch("k3", 6, 2, 320, 100)  # 100 µs gap, launched early: other
    b.launch("k4", 450, 5, 460, 40)  # launched after k3 ended at 420: host wait (40 µs)
    m = analyze_trace(build(tmp_path, b), rules=False).metrics
    assert m.span_ns == 490_000 and m.busy_ns == 340_000 and m.idle_ns == 150_000
    assert (m.idle_kernel_wait_ns, m.idle_other_ns, m.idle_host_wait_ns) == (10_000, 100_000, 40_000)
    assert m.idle_host_wait_ns + m.idle_kernel_wait_ns + m.idle_other_ns == m.idle_ns
    assert m.kernel_count == 4 and m.step_count == 1 and m.kernels_per_step == 4


def test_overlap_and_exposed_communication(tmp_path):
    b = KinetoBuilder()
    b.launch("gemm_kernel", 0, 1, 0, 100, stream=7)
    b.launch("ncclDevKernel_AllReduce_Sum_f32", 1, 1, 50, 100, stream=20)  # 50 of 100 overlapped
    b.launch("Memcpy DtoD (Device -> Device)", 2, 1, 200, 10, stream=7, cat="gpu_memcpy")
    m = analyze_trace(build(tmp_path, b), rules=False).metrics
    assert m.compute_ns == 100_000 and m.communication_ns == 100_000
    assert m.exposed_communication_ns == 50_000 and m.comm_overlap_pct == 50.0
    assert m.memory_ns == 10_000 and m.memcpy_count == 1
    assert m.busy_ns == 160_000 and m.span_ns == 210_000


def test_launch_delay_and_steps(tmp_path):
    b = KinetoBuilder()
    for i in range(3):
        b.step(i, i * 100, 100)
        b.launch("k", i * 100 + 1, 4, i * 100 + 15, 50)  # delay = 15 - 5 = 10 µs
    r = analyze_trace(build(tmp_path, b), rules=False)
    m = r.metrics
    assert m.launch_delay_mean_ns == 10_000 and m.launch_delay_p95_ns == 10_000
    assert m.step_count == 3 and m.step_time_mean_ns == 100_000
    assert r.steps["kernel_count"].to_list() == [1, 1, 1]
    assert r.steps["busy_ns"].to_list() == [50_000] * 3


def test_kernel_summary_and_operators(tmp_path):
    b = KinetoBuilder()
    b.op("aten::mm", 0, 10, ext=1)
    b.launch("gemm", 1, 1, 10, 30, ext=1)
    b.launch("gemm", 2, 1, 50, 10, ext=1)
    b.launch("vectorized_elementwise_kernel", 3, 1, 70, 20)
    r = analyze_trace(build(tmp_path, b), rules=False)
    top = r.kernels.row(0, named=True)
    assert (top["name"], top["instances"], top["total_ns"], top["min_ns"], top["max_ns"]) == (
        "gemm", 2, 40_000, 10_000, 30_000)
    assert abs(r.kernels["pct_gpu_time"].sum() - 100) < 1e-9
    assert r.operators.row(0, named=True)["name"] == "aten::mm"
    assert r.utilization.height == 100 and r.utilization["busy_pct"].max() <= 100.0


def test_interval_union_and_intersection():
    a = pl.DataFrame({"start_ns": [0, 5, 20], "end_ns": [10, 12, 30]})
    b = pl.DataFrame({"start_ns": [8, 25], "end_ns": [22, 40]})
    assert intervals.union_length(a) == 22
    assert intervals.intersection_length(a, b) == 4 + 2 + 5
    merged = intervals.merge(a)
    assert merged.rows() == [(0, 12), (20, 30)]


def test_cpu_only_trace_has_no_gpu_metrics(tmp_path):
    b = KinetoBuilder()
    b.op("aten::add", 0, 10)
    r = analyze_trace(build(tmp_path, b), rules=False)
    assert r.metrics.span_ns == 0 and r.metrics.kernel_count == 0
    assert Views(build(tmp_path, b)).window == (0, 10_000)
