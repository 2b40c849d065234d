"""Each built-in rule on small canonical traces built here: one where it must fire, one where it
must stay quiet (and, where it has one, the input that makes it not applicable)."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceanalyzer.analysis.views import Views
from traceanalyzer.categories import activity_category
from traceanalyzer.model import Device, Trace, TraceMeta, conform
from traceanalyzer.rules import RuleConfig, evaluate

US = 1_000


class Synth:
    """A tiny trace in canonical frames. Times are given in µs."""

    def __init__(self, sm_count: int | None = 132, cc: str | None = "9.0") -> None:
        self.gpu: list[dict[str, Any]] = []
        self.cpu: list[dict[str, Any]] = []
        self.ann: list[dict[str, Any]] = []
        self.corr = 0
        self.devices = [Device(id=0, name="NVIDIA H200", sm_count=sm_count, compute_capability=cc,
                               vendor="nvidia")]

    def _base(self) -> dict[str, Any]:
        return {"rank": 0, "pid": 1, "tid": 1}

    def op(self, name: str, start: float, dur: float, *, ext: int | None = None,
           dims: Any = None, types: Any = None, kind: str = "op") -> None:
        self.cpu.append({**self._base(), "kind": kind, "name": name, "start_ns": int(start * US),
                         "end_ns": int((start + dur) * US), "external_id": ext,
                         "input_dims": json.dumps(dims) if dims is not None else None,
                         "input_types": json.dumps(types) if types is not None else None})

    def api(self, name: str, start: float, dur: float, *, corr: int | None = None,
            ext: int | None = None, op: str | None = None) -> None:
        self.cpu.append({**self._base(), "kind": "runtime", "name": name,
                         "start_ns": int(start * US), "end_ns": int((start + dur) * US),
                         "correlation": corr, "external_id": ext, "parent_op": op})

    def kernel(self, name: str, start: float, dur: float, *, launch: float | None = None,
               stream: int = 7, grid: tuple[int, int, int] = (1024, 1, 1),
               block: tuple[int, int, int] = (256, 1, 1), ext: int | None = None,
               op: str | None = None, kind: str = "kernel", api: str | None = "cudaLaunchKernel",
               **extra: Any) -> None:
        """A GPU activity and (unless ``api`` is None: launched before the trace began) its
        launch call."""
        self.corr += 1
        launch = start - 6 if launch is None else launch
        if api is not None:
            self.api(api, launch, 4, corr=self.corr, ext=ext, op=op)
        row = {"rank": 0, "device": 0, "stream": stream, "kind": kind, "name": name,
               "start_ns": int(start * US), "end_ns": int((start + dur) * US),
               "correlation": self.corr, "external_id": ext}
        if kind == "kernel":
            row.update(grid_x=grid[0], grid_y=grid[1], grid_z=grid[2],
                       block_x=block[0], block_y=block[1], block_z=block[2])
        row.update(extra)
        self.gpu.append(row)

    def annotation(self, name: str, start: float, dur: float, *, kind: str = "user",
                   step: int | None = None) -> None:
        self.ann.append({**self._base(), "kind": kind, "name": name, "start_ns": int(start * US),
                         "end_ns": int((start + dur) * US), "step": step})

    def step(self, n: int, start: float, dur: float) -> None:
        self.annotation(f"ProfilerStep#{n}", start, dur, kind="step", step=n)

    def trace(self) -> Trace:
        gpu = pl.DataFrame(self.gpu, infer_schema_length=None) if self.gpu else pl.DataFrame()
        if self.gpu:
            gpu = gpu.with_columns(category=activity_category(pl.col("kind"), pl.col("name")))
        frames = {
            "gpu": conform(gpu, "gpu") if self.gpu else conform(pl.DataFrame({"rank": []}), "gpu"),
            "cpu": conform(pl.DataFrame(self.cpu, infer_schema_length=None), "cpu")
            if self.cpu else conform(pl.DataFrame({"rank": []}), "cpu"),
            "annotations": conform(pl.DataFrame(self.ann, infer_schema_length=None), "annotations")
            if self.ann else conform(pl.DataFrame({"rank": []}), "annotations"),
            "syncs": conform(pl.DataFrame({"rank": []}), "syncs"),
            "counters": conform(pl.DataFrame({"rank": []}), "counters"),
        }
        trace = Trace(meta=TraceMeta(path="synthetic", source_format="kineto",
                                     devices=self.devices), **frames)
        trace.validate()
        return trace


def run(synth: Synth, **overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Findings and outcomes by slug, with the properties every finding must have checked."""
    views = Views(synth.trace())
    findings, outcomes = evaluate(views, RuleConfig(overrides=dict(overrides)))
    window = views.window[1] - views.window[0] if views.window else 0
    for f in findings:
        assert 0 <= f.impact_ns <= window
        assert 0 <= f.impact_pct <= 100
        assert "\n" not in f.message and "{" not in f.message
        assert f.fix and f.rule_id.startswith("TA")
    assert [f.impact_ns for f in findings] == sorted((f.impact_ns for f in findings), reverse=True)
    for o in outcomes:
        assert o.status in ("fired", "quiet", "not_applicable"), (o.slug, o.status, o.reason)
    return {f.slug: f for f in findings}, {o.slug: o for o in outcomes}


def busy_loop(s: Synth, n: int = 20, dur: float = 200, name: str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn",
              start: float = 0, stream: int = 7) -> float:
    """Back-to-back kernels launched well ahead: a GPU with nothing wrong. Returns the end time."""
    t = start
    for i in range(n):
        s.kernel(name, t, dur, launch=start + i * 5, stream=stream)
        t += dur + 2
    return t


# --- a well-tuned trace raises nothing ---------------------------------------------------------


def test_well_tuned_trace_has_no_findings():
    s = Synth()
    t = 0.0
    for step in range(4):
        s.step(step, t, 4100)
        for i in range(20):
            s.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", t + i * 202,
                     200, launch=t + i * 5)
        t += 20 * 202 + 5
    findings, outcomes = run(s)
    assert findings == {}
    assert outcomes["gpu-idle-gaps"].status == "quiet"
    assert outcomes["odd-matmul-shape"].status == "not_applicable"
    assert "shapes" in outcomes["odd-matmul-shape"].reason


# --- gpu-idle-gaps ------------------------------------------------------------------------------


def test_gpu_idle_gaps_fires_on_host_wait_gaps():
    s = Synth()
    s.step(0, 0, 3000)
    for i in range(10):
        # each kernel is launched only after the previous one ended: host wait
        s.kernel("gemm", i * 300 + 10, 100, launch=i * 300 + 2)
    findings, outcomes = run(s)
    f = findings["gpu-idle-gaps"]
    assert "host wait 100%" in f.message and "CPU-bound" in f.message
    assert f.impact_ns == 9 * 200 * US
    assert f.evidence[0]["cause"] == "host_wait" and f.evidence[0]["end_ns"] > f.evidence[0]["start_ns"]
    assert f.impact_per_step_ns == f.impact_ns  # one step
    assert outcomes["gpu-idle-gaps"].status == "fired"


def test_gpu_idle_gaps_quiet_when_busy_and_tunable():
    s = Synth()
    busy_loop(s)
    findings, _ = run(s)
    assert "gpu-idle-gaps" not in findings
    s = Synth()
    for i in range(10):
        s.kernel("gemm", i * 300 + 10, 100, launch=i * 300 + 2)
    assert "gpu-idle-gaps" in run(s)[0]
    # a threshold above the gaps silences it
    assert "gpu-idle-gaps" not in run(s, **{"gpu-idle-gaps": {"min_gap_us": 500}})[0]


# --- hidden-sync --------------------------------------------------------------------------------


def _sync_step(s: Synth, t0: float, with_sync: bool) -> None:
    s.step(int(t0 // 10_000), t0, 10_000)
    for i in range(10):  # queued well ahead: the GPU is busy 0..2000
        s.kernel("gemm", t0 + 20 + i * 200, 200, launch=t0 + 1 + i * 5)
    if with_sync:
        # loss.item(): the CPU waits for the queue to drain, then Python takes 3 ms
        s.op("aten::item", t0 + 60, 2000, ext=900)
        s.op("aten::_local_scalar_dense", t0 + 61, 1998, ext=901)
        s.api("cudaStreamSynchronize", t0 + 62, 1960, op="aten::_local_scalar_dense")
        s.kernel("gemm", t0 + 5030, 200, launch=t0 + 5020)
    else:
        s.kernel("gemm", t0 + 2020, 200, launch=t0 + 60)


def test_hidden_sync_fires_and_names_the_operator():
    s = Synth()
    _sync_step(s, 0, True)
    _sync_step(s, 10_000, True)
    findings, _ = run(s)
    f = findings["hidden-sync"]
    assert f.evidence[0]["op"] == "aten::item"
    assert f.evidence[0]["api"] == "cudaStreamSynchronize"
    # the CPU waits from aten::item (60) for the queue to drain (2020): 1960 µs of GPU work;
    # the GPU idles from the call's return (2022) to the next kernel (5030)
    assert f.evidence[0]["waited_us"] == pytest.approx(1960)
    assert f.evidence[0]["gpu_idle_after_us"] == pytest.approx(3008)
    # without the sync the 3 ms of Python would have run while the GPU drained its 1960 µs
    assert f.evidence[0]["lost_us"] == pytest.approx(1960)
    assert f.impact_ns == 2 * 1960 * US
    assert "2 host-device synchronizations" in f.message and "aten::item" in f.message


def test_hidden_sync_costs_only_the_relaunch_when_the_cpu_launches_at_once():
    # A GPU-bound loop reading the loss: the CPU waits 1960 µs, then launches again 30 µs later.
    s = Synth()
    for t0 in (0, 10_000):
        s.step(int(t0 // 10_000), t0, 10_000)
        for i in range(10):
            s.kernel("gemm", t0 + 20 + i * 200, 200, launch=t0 + 1 + i * 5)
        s.op("aten::item", t0 + 60, 1965, ext=900)
        s.api("cudaStreamSynchronize", t0 + 62, 1960, op="aten::item")
        s.kernel("gemm", t0 + 2052, 200, launch=t0 + 2040)
    findings, outcomes = run(s)
    assert "hidden-sync" not in findings  # 2 x 30 µs of 20 ms
    f = run(s, **{"hidden-sync": {"min_impact_pct": 0}})[0]["hidden-sync"]
    assert f.impact_ns == 2 * 30 * US and f.evidence[0]["waited_us"] == pytest.approx(1960)


def test_hidden_sync_costs_only_the_queued_work_before_a_long_cpu_stretch():
    # The GPU had 100 µs left when the CPU synced; then 20 ms of CPU work (the next batch):
    # overlapping would have saved 100 µs, not the 20 ms of idle, which is the CPU's own doing.
    s = Synth()
    s.step(0, 0, 25_000)
    busy_loop(s, n=5)  # GPU busy 0..1008
    s.op("aten::item", 908, 102, ext=900)
    s.api("cudaStreamSynchronize", 909, 100, op="aten::item")
    s.kernel("gemm", 21_000, 200, launch=20_990)
    f = run(s, **{"hidden-sync": {"min_impact_pct": 0}})[0]["hidden-sync"]
    assert f.evidence[0]["waited_us"] == pytest.approx(100)
    assert f.evidence[0]["gpu_idle_after_us"] == pytest.approx(21_000 - 1009)
    assert f.impact_ns == 100 * US


def test_hidden_sync_counts_a_read_into_pageable_memory_as_a_sync():
    # Nsight Systems has no operators: .cpu() is a cudaMemcpyAsync into pageable memory, which
    # returns only when the copy is done. The CPU waited inside it for the queue to drain.
    s = Synth()
    s.step(0, 0, 10_000)
    busy_loop(s, n=10)  # GPU busy 0..2018, but for 2 µs between kernels
    s.kernel("Memcpy DtoH (Device -> Pageable)", 2020, 2, kind="memcpy", launch=100,
             api="cudaMemcpyAsync", bytes=4, copy_kind="DtoH", src_kind="device",
             dst_kind="pageable")
    s.cpu[-1]["end_ns"] = 2023 * US
    s.kernel("gemm", 5000, 200, launch=4990)
    f = run(s)[0]["hidden-sync"]
    assert f.evidence[0]["api"] == "cudaMemcpyAsync"
    assert f.evidence[0]["waited_us"] == pytest.approx(2018 - 100 - 9 * 2)
    assert f.impact_ns == 1900 * US


def test_hidden_sync_waits_only_for_gpu_work():
    # The operator began long before the GPU had anything to do (a first call that also
    # initialized CUDA): only the GPU's busy time inside the wait counts as waiting for it.
    s = Synth()
    s.step(0, 0, 20_000)
    s.op("aten::to", -50_000, 50_620, ext=900)
    s.kernel("gemm", 400, 200, launch=390)
    s.api("cudaStreamSynchronize", 560, 60, op="aten::to")
    s.kernel("gemm", 5000, 200, launch=4990)
    f = run(s, **{"hidden-sync": {"min_impact_pct": 0}})[0]["hidden-sync"]
    assert f.evidence[0]["waited_us"] == pytest.approx(200)


def test_hidden_sync_quiet_without_syncs():
    s = Synth()
    _sync_step(s, 0, False)
    _sync_step(s, 10_000, False)
    assert "hidden-sync" not in run(s)[0]


# --- unfused-elementwise-chain ------------------------------------------------------------------


def _elementwise(s: Synth, chain: bool) -> None:
    t = 0.0
    for i in range(6):
        if not chain:
            s.kernel("sm90_xmma_gemm_bf16", t, 50, launch=t - 10)
            t += 52
        s.kernel(f"vectorized_elementwise_kernel<4, mul_{i}>", t, 50, launch=t - 10,
                 grid=(4096, 1, 1), block=(128, 1, 1))
        t += 52


def test_unfused_elementwise_chain_fires_on_a_run():
    s = Synth()
    _elementwise(s, chain=True)
    findings, _ = run(s)
    f = findings["unfused-elementwise-chain"]
    assert "longest 6" in f.message
    # no shapes: 2.5 HBM passes a kernel (15), fusion saves 2 per link (10)
    assert f.impact_ns == 6 * 50 * US * 10 // 15
    assert f.evidence[0]["kernels_in_chain"] == 6


def test_unfused_elementwise_chain_quiet_when_interleaved():
    s = Synth()
    _elementwise(s, chain=False)
    assert "unfused-elementwise-chain" not in run(s)[0]


# --- nccl-not-overlapped ------------------------------------------------------------------------


def test_nccl_not_overlapped_fires_when_exposed():
    s = Synth()
    end = busy_loop(s, n=10)
    s.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", end + 2, 2000, stream=20)
    findings, _ = run(s)
    f = findings["nccl-not-overlapped"]
    assert f.impact_ns == 2000 * US
    assert "allreduce" in f.message and "0% of 2.0 ms of transfers overlapped" in f.message
    assert f.evidence[0]["stream"] == 20


def test_nccl_not_overlapped_quiet_when_hidden_by_compute():
    s = Synth()
    busy_loop(s, n=20)
    s.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 100, 2000, stream=20)
    assert "nccl-not-overlapped" not in run(s)[0]


# --- launch-overhead-bound ----------------------------------------------------------------------


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


# --- small-grid ---------------------------------------------------------------------------------


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


# --- pageable-memcpy / sync-memcpy ---------------------------------------------------------------


def _copy(s: Synth, src: str, api: str = "cudaMemcpyAsync") -> None:
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)" if src == "pageable" else "Memcpy HtoD (Pinned -> Device)",
             end + 10, 300, kind="memcpy", api=api, bytes=64 << 20, copy_kind="HtoD",
             src_kind=src, dst_kind="device")


def test_pageable_memcpy_fires_and_pinned_is_quiet():
    s = Synth()
    _copy(s, "pageable")
    f = run(s)[0]["pageable-memcpy"]
    assert f.impact_ns == 300 * US and "1 copy from" in f.message
    assert f.evidence[0]["exposed_us"] == pytest.approx(300)
    s = Synth()
    _copy(s, "pinned")
    assert "pageable-memcpy" not in run(s)[0]


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


# --- fp32-matmul ----------------------------------------------------------------------------------


def test_fp32_matmul_fires_by_kernel_name_and_by_input_types():
    s = Synth()
    busy_loop(s, n=5, name="ampere_sgemm_128x64_nn")
    f = run(s)[0]["fp32-matmul"]
    assert "ampere_sgemm_128x64_nn" in f.message and f.impact_ns == 5 * 200 * US // 2
    s = Synth()
    for i in range(5):
        s.op("aten::mm", i * 300, 20, ext=i + 1, dims=[[64, 64], [64, 64]], types=["float", "float"])
        s.kernel("cutlass::Kernel2<cutlass_80_tensorop_gemm>", i * 300 + 30, 200, ext=i + 1,
                 launch=i * 300 + 5)
    f = run(s)[0]["fp32-matmul"]
    assert "aten::mm" in f.message


def test_fp32_matmul_quiet_for_bf16_and_not_applicable_without_tensor_cores():
    s = Synth()
    busy_loop(s, n=5)
    assert "fp32-matmul" not in run(s)[0]
    # cuBLAS's GEMV kernels: the same name stem for every type, the types spelled out.
    s = Synth()
    busy_loop(s, n=5, name="void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, "
              "__nv_bfloat16, float, 128, 16, 4, 4, false, false>")
    assert "fp32-matmul" not in run(s)[0]
    s = Synth()
    busy_loop(s, n=5, name="void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, "
              "4, 4, false, false>")
    assert "fp32-matmul" in run(s)[0]
    s = Synth(cc="6.1")
    busy_loop(s, n=5, name="maxwell_sgemm_128x64_nn")
    _, outcomes = run(s)
    assert outcomes["fp32-matmul"].status == "not_applicable"


# --- gpus-take-turns ----------------------------------------------------------------------------


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


# --- small-batch-matmul -------------------------------------------------------------------------


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


# --- odd-matmul-shape ---------------------------------------------------------------------------


ALIGN1 = "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>"
ALIGN2 = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>"
NVJET = "nvjet_sm90_tst_256x144_64x4_2x1_v_bz_coopA_TNT"


def _gemm_ops(s: Synth, dims: list[list[int]], n: int = 5,
              kernel: str = "sm90_xmma_gemm_bf16bf16") -> None:
    for i in range(n):
        s.op("aten::mm", i * 300, 20, ext=i + 1, dims=dims, types=["c10::BFloat16"] * 2)
        s.kernel(kernel, i * 300 + 30, 250, ext=i + 1, launch=i * 300 + 5)


def test_odd_matmul_shape_fires_on_unaligned_dims():
    # cuBLAS fell back to an align1 kernel for the unaligned N: padding saves most of its time
    # (73-84% measured on an H200, scripts/measure/gemm_padding_h200.json).
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50257]], kernel=ALIGN1)
    f = run(s)[0]["odd-matmul-shape"]
    assert "M=4096 N=50257 K=768" in f.message
    assert f.evidence[0]["odd_dims"] == "N"
    assert f.impact_ns == int(5 * 250 * US * 0.75)


def test_odd_matmul_shape_counts_less_for_an_align2_kernel():
    # N a multiple of 2 or 4, not 8: an sm80 align2 kernel, 59-63% saved by padding (measured).
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50260]], kernel=ALIGN2)
    assert run(s)[0]["odd-matmul-shape"].impact_ns == int(5 * 250 * US * 0.60)


def test_odd_matmul_shape_quiet_on_an_unaligned_m_in_a_fast_kernel():
    # M (batch x sequence) is not a leading dimension: cuBLAS keeps its sm90 kernels, and padding
    # M saved nothing measurable on an H200 (-5 to +6%).
    s = Synth()
    _gemm_ops(s, [[4095, 4096], [4096, 4096]], kernel=NVJET)
    findings, outcomes = run(s)
    assert "odd-matmul-shape" not in findings and outcomes["odd-matmul-shape"].status == "quiet"


def test_odd_matmul_shape_counts_the_last_tile_when_the_kernel_kept_up():
    # N aligned to 8 but not 64, in the fast kernel: only the last tile's unused part is lost.
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50200]], kernel=NVJET)
    f = run(s, **{"odd-matmul-shape": {"min_impact_pct": 0}})[0]["odd-matmul-shape"]
    assert f.impact_ns == int(5 * 250 * US * (50240 - 50200) / 50240)


def test_odd_matmul_shape_quiet_when_aligned_and_na_without_shapes():
    s = Synth()
    _gemm_ops(s, [[4096, 768], [768, 50304]])
    findings, outcomes = run(s)
    assert "odd-matmul-shape" not in findings and outcomes["odd-matmul-shape"].status == "quiet"
    s = Synth()
    busy_loop(s, n=5)
    _, outcomes = run(s)
    assert outcomes["odd-matmul-shape"].status == "not_applicable"
    assert outcomes["odd-matmul-shape"].reason.startswith("input shapes were not recorded")


# --- unfused-attention --------------------------------------------------------------------------


def _attention(s: Synth, fused: bool, layers: int = 4) -> None:
    t = 0.0
    for _ in range(layers):
        if fused:
            s.kernel("flash_fwd_kernel", t, 100, launch=t - 10)
            t += 102
            continue
        for name, dur in (("ampere_bf16_s16816gemm_bf16_128x64", 50),
                          ("vectorized_elementwise_kernel<mul>", 20),
                          ("cunn_SoftMaxForward<8, c10::BFloat16>", 60),
                          ("ampere_bf16_s16816gemm_bf16_64x64", 50)):
            s.kernel(name, t, dur, launch=t - 10)
            t += dur + 2


def test_unfused_attention_fires_on_gemm_softmax_gemm():
    s = Synth()
    _attention(s, fused=False)
    f = run(s)[0]["unfused-attention"]
    assert "4 attention blocks" in f.message
    assert f.impact_ns == 4 * 80 * US  # the scale and softmax kernels between the GEMMs


def test_unfused_attention_quiet_on_flash_and_on_loss_softmax():
    s = Synth()
    _attention(s, fused=True)
    assert "unfused-attention" not in run(s)[0]
    s = Synth()  # LM head -> log-softmax -> NLL: no GEMM after the softmax
    t = 0.0
    for _ in range(3):
        for name in ("sm90_xmma_gemm_bf16", "cunn_SoftMaxForward<LogSoftMaxForwardEpilogue>",
                     "nll_loss_forward_reduce_cuda_kernel", "reduce_kernel", "reduce_kernel",
                     "reduce_kernel"):
            s.kernel(name, t, 50, launch=t - 10)
            t += 52
    assert "unfused-attention" not in run(s)[0]


# --- dataloader-stall ---------------------------------------------------------------------------


def test_dataloader_stall_fires_when_gpu_waits_for_data():
    s = Synth()
    for step in range(3):
        t = step * 3000
        s.step(step, t, 3000)
        s.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", t, 2000)
        busy_loop(s, n=4, start=t + 2010)
    f = run(s)[0]["dataloader-stall"]
    assert "DataLoader" in f.message
    # steps 1 and 2 load for 2000 µs while the GPU idles; step 0's loading precedes the window
    assert f.impact_ns == 2 * 2000 * US


def test_dataloader_stall_quiet_when_prefetched_and_na_without_ranges():
    s = Synth()
    end = busy_loop(s, n=20)
    s.annotation("load_batch", 100, end - 200)  # loading while the GPU is busy
    _, outcomes = run(s)
    assert outcomes["dataloader-stall"].status == "quiet"
    s = Synth()
    busy_loop(s, n=5)
    assert run(s)[1]["dataloader-stall"].status == "not_applicable"


# --- unfused-optimizer --------------------------------------------------------------------------


def test_unfused_optimizer_fires_on_per_parameter_kernels():
    s = Synth()
    s.annotation("Optimizer.step#AdamW.step", 0, 2000)
    for i in range(80):
        s.kernel("vectorized_elementwise_kernel<add_>", 10 + i * 20, 4, launch=5 + i * 20)
    f = run(s)[0]["unfused-optimizer"]
    assert ("1 optimizer step (Optimizer.step#AdamW.step) launched 80 kernels each "
            "(0 multi-tensor)") in f.message
    assert "Optimizer.step#AdamW.step" in f.message


def test_unfused_optimizer_quiet_for_foreach_and_na_without_optimizer():
    s = Synth()
    s.annotation("Optimizer.step#AdamW.step", 0, 200)
    for i in range(4):
        s.kernel("multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>", 10 + i * 40, 35,
                 launch=5 + i * 5)
    _, outcomes = run(s)
    assert outcomes["unfused-optimizer"].status == "quiet"
    s = Synth()
    busy_loop(s, n=3)
    assert run(s)[1]["unfused-optimizer"].status == "not_applicable"


# --- low-gpu-utilization -----------------------------------------------------------------------


def test_low_gpu_utilization_fires_when_mostly_idle():
    s = Synth()
    for i in range(40):
        s.kernel("gemm", i * 100, 10, launch=i * 100 - 2)  # 10% busy throughout
    f = run(s)[0]["low-gpu-utilization"]
    assert f.message.startswith("30 of 30 time chunks")
    assert "low-gpu-utilization" not in run(s, **{"low-gpu-utilization": {"max_util_pct": 5}})[0]


def test_low_gpu_utilization_quiet_with_one_slow_chunk():
    s = Synth()
    busy_loop(s, n=100)
    s.kernel("gemm", 20_300, 10, launch=20_290)  # one late kernel: only the last chunks are low
    assert "low-gpu-utilization" not in run(s)[0]


# --- properties -----------------------------------------------------------------------------------


kernel_st = st.tuples(
    st.sampled_from(["gemm_bf16", "ampere_sgemm", "vectorized_elementwise_kernel",
                     "ncclDevKernel_AllReduce", "cunn_SoftMaxForward", "layer_norm_kernel"]),
    st.integers(0, 5000), st.integers(1, 800), st.sampled_from([7, 20]),
    st.integers(1, 300), st.integers(0, 400),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(kernel_st, min_size=1, max_size=40), st.booleans(), st.booleans())
def test_impact_never_exceeds_window(kernels, with_steps, with_sync):
    s = Synth()
    for name, start, dur, stream, blocks, lead in kernels:
        s.kernel(name, start, dur, stream=stream, grid=(blocks, 1, 1), launch=start - lead)
    if with_steps:
        s.step(0, -500, 3000)
        s.step(1, 2500, 3500)
    if with_sync:
        s.api("cudaDeviceSynchronize", 1000, 900)
        s.annotation("data_load", 0, 4000)
    run(s)  # run() checks impact <= window, pct <= 100, sorted, and that no rule crashed


def test_dataloader_stall_from_python_frames_without_a_dataloader():
    # A loop that builds its batch itself: only with_stack=True Python frames show the loading.
    s = Synth()
    for step in range(3):
        t = step * 3000
        s.step(step, t, 3000)
        s.op("train.py(60): step", t, 2990, kind="python")
        for j in range(8):
            s.op("data/images.py(24): __getitem__", t + 5 + j * 250, 240, kind="python")
        s.op("torch/nn/modules/container.py(330): __getitem__", t + 2005, 5, kind="python")
        busy_loop(s, n=4, start=t + 2010)
    f = run(s)[0]["dataloader-stall"]
    assert "__getitem__" in f.message and "train.py" not in f.message
    assert f.impact_ns == 2 * 8 * 240 * US


def test_unfused_attention_ignores_the_loss_log_softmax_in_training():
    # Linear -> log-softmax (bf16 warp kernel with is_log_softmax=true) -> NLL -> backward GEMM
    s = Synth()
    t = 0.0
    for _ in range(3):
        for name, op in (("sm90_xmma_gemm_bf16bf16", "aten::addmm"),
                         ("softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, true, false>",
                          "aten::_log_softmax"),
                         ("nll_loss_forward_reduce_cuda_kernel_2d", "aten::nll_loss_forward"),
                         ("nll_loss_backward_reduce_cuda_kernel_2d", "aten::nll_loss_backward"),
                         ("sm90_xmma_gemm_bf16bf16", "aten::mm")):
            s.kernel(name, t, 50, launch=t - 10, op=op)
            t += 52
    assert "unfused-attention" not in run(s)[0]


def test_unfused_elementwise_chain_skips_generated_kernels():
    # One fused Triton kernel per layer, six layers in a row: already fused, not a chain.
    s = Synth()
    for i in range(6):
        s.kernel("swiglu_bias_gelu_residual_kernel", i * 52, 50, launch=i * 52 - 10,
                 api="cuLaunchKernel")
    assert "unfused-elementwise-chain" not in run(s)[0]
    s = Synth()
    for i in range(6):
        s.kernel(f"triton_poi_fused_add_mul_{i}", i * 52, 50, launch=i * 52 - 10)
    assert "unfused-elementwise-chain" not in run(s)[0]


def test_unfused_optimizer_without_ranges_from_adam_kernels():
    # An Nsight Systems trace has no Optimizer.step range: the per-parameter Adam kernels
    # (lerp, addcmul, addcdiv, one each per parameter) still show the unfused step.
    s = Synth()
    s.step(0, 0, 5000)
    t = 10.0
    for _ in range(30):  # 30 parameters
        for name in ("vectorized_elementwise_kernel<mul>", "lerp_kernel_scalar_weight",
                     "vectorized_elementwise_kernel<mul>", "addcmul_cuda_kernel",
                     "vectorized_elementwise_kernel<sqrt>", "addcdiv_cuda_kernel"):
            s.kernel(name, t, 4, launch=t - 8)
            t += 15
    f = run(s)[0]["unfused-optimizer"]
    assert "no optimizer range recorded" in f.message
    s = Synth()
    s.step(0, 0, 500)
    for i in range(3):
        s.kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor, lerp>", 10 + i * 100, 90,
                 launch=5 + i)
    _, outcomes = run(s)
    assert outcomes["unfused-optimizer"].status == "quiet"


def test_two_ranks_in_one_trace_judge_the_trace_rank_only():
    # A merged trace: rank 1 idles a lot, rank 0 (the trace's own rank) is busy.
    s = Synth()
    busy_loop(s, n=20)
    for i in range(10):
        s.kernel("gemm_bf16", i * 1000, 50, launch=i * 1000 - 5)
    for row in s.gpu[20:]:
        row["rank"] = 1
    findings, _ = run(s)  # run() checks every impact against rank 0's window
    assert "gpu-idle-gaps" not in findings


def test_pageable_copy_is_charged_the_overlap_its_wait_lost():
    # x.to("cuda") from pageable memory, called 500 µs before the queue drains: the call returns
    # when the copy is done (at 1310 µs); the next kernel is launched 500 µs later. Without the
    # wait the CPU's 500 µs would have overlapped the GPU's last 494 µs of work (the queue's
    # last 498 µs less two 2 µs gaps between kernels).
    s = Synth()
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)", end + 10, 300, kind="memcpy", launch=end - 500,
             bytes=64 << 20, copy_kind="HtoD", src_kind="pageable", dst_kind="device",
             api="cudaMemcpyAsync")
    s.cpu[-1]["end_ns"] = int((end + 312) * US)  # the host call blocks until the copy is done
    s.kernel("gemm_bf16", end + 820, 100, launch=end + 810)
    f = run(s)[0]["pageable-memcpy"]
    assert f.evidence[0]["waited_us"] == pytest.approx(494)
    assert f.evidence[0]["gpu_idle_after_us"] == pytest.approx(508)
    assert f.impact_ns == (300 + 494) * US


def test_a_pageable_copy_onto_an_idle_gpu_loses_nothing():
    # The step begins by copying its batch: the GPU has nothing queued, so the call waits for no
    # GPU work, and the idle after it is the CPU's own time. Only the copy itself is charged.
    s = Synth()
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)", end + 1000, 300, kind="memcpy",
             launch=end + 990, bytes=64 << 20, copy_kind="HtoD", src_kind="pageable",
             dst_kind="device", api="cudaMemcpyAsync")
    s.cpu[-1]["end_ns"] = int((end + 1302) * US)
    s.kernel("gemm_bf16", end + 3000, 100, launch=end + 2990)
    f = run(s)[0]["pageable-memcpy"]
    assert f.evidence[0]["waited_us"] == 0 and f.evidence[0]["lost_us"] == 0
    assert f.impact_ns == 300 * US


def test_small_grid_judges_a_kernel_by_its_typical_launch():
    # A multi-tensor optimizer kernel: full chunks of 90 blocks and a short last one of 20.
    s = Synth()
    for i in range(10):
        s.kernel("multi_tensor_apply_kernel<FusedAdamMathFunctor>", i * 102, 100, launch=0,
                 grid=(90 if i % 5 else 20, 1, 1))
    assert "small-grid" not in run(s)[0]


def test_odd_matmul_shape_from_kernel_names_without_shapes():
    # Nsight Systems records no shapes; cuBLAS's fallback to an alignment-1 kernel still shows it.
    s = Synth()
    for i in range(5):
        s.kernel("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1>(T1::Params)",
                 i * 300, 250, launch=i * 300 - 10)
    f = run(s)[0]["odd-matmul-shape"]
    assert "align1" in f.message and f.impact_ns == int(5 * 250 * US * 0.75)
    for name in ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_ffma_aligna4_alignc4_execute_kernel",
                 "cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>"):  # FP32: any layout
        s = Synth()
        busy_loop(s, n=5, name=name)
        assert run(s)[1]["odd-matmul-shape"].status == "not_applicable"


def test_unfused_elementwise_chain_counts_passes_from_shapes():
    # silu(gate) * up + bias -> gelu -> + residual: 2 + 3 + 2 + 2 + 3 = 12 passes over 64 MiB
    # tensors; fused, the 4 links save 8 of them.
    s = Synth()
    full = [4096, 8192]
    ops = [("aten::silu", [full]), ("aten::mul", [full, full]), ("aten::add", [full, [8192]]),
           ("aten::gelu", [full]), ("aten::add", [full, full])]
    for i, (op, dims) in enumerate(ops):
        s.op(op, i * 60, 10, ext=i + 1, dims=dims, types=["c10::BFloat16"] * len(dims))
        s.kernel(f"vectorized_elementwise_kernel<8, {op}>", 100 + i * 52, 50, ext=i + 1,
                 launch=i * 60 + 2, grid=(4096, 1, 1), block=(128, 1, 1))
    f = run(s)[0]["unfused-elementwise-chain"]
    assert f.impact_ns == 5 * 50 * US * 8 // 12
    assert f.evidence[0]["tensor_bytes"] == 4096 * 8192 * 2
    gb = 4096 * 8192 * 2 / 1e9
    assert f"HBM traffic {12 * gb:.2f} GB now against {4 * gb:.2f} GB fused" in f.message


def test_a_staged_pageable_copy_is_not_charged_the_idle_after_it():
    # torch.tensor(0.5).to("cuda"): an 8-byte pageable copy is staged and its call returns at
    # once; the copy runs 5 ms later behind the queued kernels. The GPU idles after it because
    # the host has nothing more to launch, not because of the copy.
    s = Synth()
    end = busy_loop(s, n=5)
    s.kernel("Memcpy HtoD (Pageable -> Device)", end + 10, 300, kind="memcpy", launch=end - 5000,
             bytes=8, copy_kind="HtoD", src_kind="pageable", dst_kind="device",
             api="cudaMemcpyAsync")
    s.kernel("gemm_bf16", end + 2820, 100, launch=end + 2810)
    f = run(s)[0]["pageable-memcpy"]  # the copy's own 300 µs are still counted
    assert f.evidence[0]["gpu_idle_after_us"] == 0 and f.evidence[0]["lost_us"] == 0
    assert f.impact_ns == 300 * US
