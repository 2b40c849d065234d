"""No step of the analysis grows faster than the trace (issue 28).

A synthetic trace of N steps and one of 8N steps, each step holding what every built-in rule
looks for (unfused attention, elementwise chains, GEMMs with shapes, FP32 and small-batch GEMMs,
small grids, an exposed all-reduce that waits, syncs, pageable and synchronous copies, an unfused
optimizer, data loading, a second GPU taking turns, launch-bound steps, Python frames), go
through every view and every rule. Every Polars operation that can make more rows than it is
given (joins of every kind, including as-of, range and cross joins, and explode) is recorded
with its output's row count and the line of traceanalyzer that called it. The test fails when a
call site's largest output grows more than 8x (plus slack) from N to 8N, or when any output has
more rows than a few times the whole trace: a join on a coarse key followed by a filter, the
shape of the old unfused-attention (every kernel of a stream with every softmax on it), fails
both. No timing: only row counts, so it is deterministic on any machine.
"""

from __future__ import annotations

import functools
import threading
import traceback
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.support.synth import NCCL, Synth
from traceanalyzer.analysis import analyze_trace
from traceanalyzer.analysis.job import analyze_job, combine
from traceanalyzer.analysis.views import TABLE_NAMES, Views
from traceanalyzer.model import Trace
from traceanalyzer.rules import RuleConfig
from traceanalyzer.rules.loader import builtin_slugs

N_STEPS = 24
GROWTH = 8
#: How much more than GROWTH x a call site's largest output may grow (ties, edges of the trace).
SLACK = 0.25
#: Outputs this small are not judged on growth (a handful of steps or evidence rows).
FLOOR_ROWS = 64
#: No intermediate frame may have more rows than this many times the trace's events.
MAX_ROWS_PER_EVENT = 4
#: No join may make more rows than this many times the rows of its two sides: a join whose keys
#: match many rows on both sides (pairs filtered afterwards) is the shape this test is about.
MAX_JOIN_GROWTH = 4

#: Every threshold as low as it goes, so that each detector runs its whole path (evidence,
#: source lines, shapes) instead of returning before its costly part.
LOW = {
    "collective-wait": {"min_wait_pct": 0},
    "dataloader-stall": {"min_stall_pct": 0},
    "fp32-matmul": {"min_gpu_time_pct": 0, "min_impact_pct": 0},
    "gemm-below-roofline": {"max_roofline_pct": 100, "min_kernel_us": 0, "min_impact_pct": 0},
    "memory-bound-below-bandwidth": {"max_bandwidth_pct": 100, "min_kernel_us": 0,
                                     "min_impact_pct": 0},
    "memcpy-bound": {"min_copy_share_pct": 0, "min_impact_pct": 0},
    "memory-near-capacity": {"min_reserved_pct": 0},
    "gpu-idle-gaps": {"min_idle_pct": 0},
    "gpus-take-turns": {"min_device_share_pct": 0, "min_impact_pct": 0},
    "hidden-sync": {"min_impact_pct": 0},
    "launch-overhead-bound": {"min_kernels_count": 10},
    "low-gpu-utilization": {"min_low_chunks_pct": 0},
    "nccl-not-overlapped": {"min_exposed_pct": 0},
    "odd-matmul-shape": {"min_gpu_time_pct": 0, "min_impact_pct": 0},
    "pageable-memcpy": {"min_impact_pct": 0},
    "small-batch-matmul": {"min_gpu_time_pct": 0, "min_impact_pct": 0},
    "small-grid": {"min_gpu_time_pct": 0, "min_saving_pct": 0},
    "sync-memcpy": {"min_blocked_pct": 0},
    "unfused-attention": {"min_impact_pct": 0},
    "unfused-elementwise-chain": {"min_saving_pct": 0},
    "unfused-optimizer": {"min_kernels_count": 5},
    **{slug: {"min_impact_pct": 0} for slug in (
        "uncoalesced-memory-access", "low-occupancy", "register-spill",
        "shared-memory-bank-conflicts", "memory-bound-below-roofline",
        "compute-bound-below-peak", "tail-effect")},
}

ATTENTION = (("ampere_bf16_s16816gemm_bf16_128x64", 40, "aten::bmm"),
             ("vectorized_elementwise_kernel<mul>", 15, "aten::mul"),
             ("cunn_SoftMaxForward<8, c10::BFloat16>", 40, "aten::softmax"),
             ("ampere_bf16_s16816gemm_bf16_64x64", 40, "aten::bmm"))


class _Clock:
    def __init__(self) -> None:
        self.ext = 0

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext


def _op(s: Synth, name: str, start: float, dur: float, **kwargs: Any) -> None:
    """An operator inside the Python frames of the model's code (a with_stack=True trace)."""
    s.op("model.py(88): forward", start - 2, dur + 4, kind="python")
    s.op("torch/nn/modules/module.py(1750): _call_impl", start - 1, dur + 2, kind="python")
    s.op(name, start, dur, **kwargs)


def _training_step(s: Synth, ids: _Clock, step: int, t: float) -> float:
    """One step of a naive training loop from ``t`` (µs); returns its end."""
    start = t
    s.op("train.py(40): train_step", t, 1, kind="python")  # widened at the end
    frame = len(s.cpu) - 1
    # data loading while the GPU idles
    s.annotation("load_batch", t, 150)
    s.op("data.py(12): __getitem__", t + 5, 140, kind="python")
    t += 160
    # pageable host-to-device copy of the batch, the call blocking until it is done
    s.kernel("Memcpy HtoD (Pageable -> Device)", t + 10, 30, kind="memcpy", launch=t,
             api="cudaMemcpyAsync", bytes=8 << 20, copy_kind="HtoD", src_kind="pageable",
             dst_kind="device")
    s.cpu[-1]["end_ns"] = int((t + 42) * 1000)
    t += 45
    # unfused attention: GEMM -> scale -> softmax -> GEMM, with shapes
    for _ in range(2):
        for name, dur, op in ATTENTION:
            ext = ids.next_ext()
            dims = [[8, 16, 128, 128]] if op == "aten::softmax" else [[128, 128, 64], [128, 64, 128]]
            _op(s, op, t - 8, 6, ext=ext, dims=dims, types=["c10::BFloat16", "c10::BFloat16"])
            s.kernel(name, t, dur, launch=t - 6, ext=ext, op=op)
            t += dur + 1
    # an elementwise chain over one tensor
    for name in ("vectorized_elementwise_kernel<add>", "vectorized_elementwise_kernel<mul>",
                 "vectorized_elementwise_kernel<gelu>", "vectorized_elementwise_kernel<div>",
                 "vectorized_elementwise_kernel<sub>"):
        ext = ids.next_ext()
        _op(s, "aten::add", t - 8, 6, ext=ext, dims=[[4096, 1024], [4096, 1024]],
             types=["c10::BFloat16", "c10::BFloat16"])
        s.kernel(name, t, 12, launch=t - 6, ext=ext, op="aten::add")
        t += 13
    # an FP32 GEMM of an odd shape, and a small-batch one
    for op, dims, name, dur in (
        ("aten::mm", [[1000, 1100], [1100, 1000]], "sm80_sgemm_128x64_nn", 80),
        ("aten::addmm", [[4096], [4, 4096], [4096, 4096]], "gemv2T_kernel_val<float>", 60),
    ):
        ext = ids.next_ext()
        _op(s, op, t - 8, 6, ext=ext, dims=dims, types=["float"] * len(dims))
        s.kernel(name, t, dur, launch=t - 6, ext=ext, op=op)
        t += dur + 1
    # a kernel with a tiny grid
    s.kernel("reduce_small_kernel", t, 30, launch=t - 6, grid=(4, 1, 1))
    t += 31
    # an all-reduce beside no compute, waiting for the other ranks in some steps
    s.kernel(NCCL, t + 2, 60 + 40 * (step % 3), launch=t - 4, stream=20)
    t += 64 + 40 * (step % 3)
    # the other GPU, taking its turn
    s.kernel("ampere_bf16_s16816gemm_bf16_256x128", t + 2, 120, launch=t - 4, device=1)
    t += 125
    # .item(): a pageable device-to-host read and a sync that waits for it
    s.kernel("Memcpy DtoH (Device -> Pageable)", t + 5, 4, kind="memcpy", launch=t,
             api="cudaMemcpyAsync", bytes=4, copy_kind="DtoH", src_kind="device",
             dst_kind="pageable")
    _op(s, "aten::item", t - 1, 30)
    s.api("cudaStreamSynchronize", t + 6, 20)
    t += 40
    # a synchronous copy
    s.kernel("Memcpy HtoD (Pinned -> Device)", t + 3, 5, kind="memcpy", launch=t,
             api="cudaMemcpy", bytes=1 << 20, copy_kind="HtoD", src_kind="pinned",
             dst_kind="device")
    s.cpu[-1]["end_ns"] = int((t + 10) * 1000)
    t += 12
    # torch.cuda.empty_cache() and the allocation after it: the GPU idles meanwhile
    s.api("cudaFree", t, 40)
    s.api("cudaMalloc", t + 42, 25)
    # what the caching allocator recorded of them: a block freed and allocated again
    s.memory(t + 1, -(1 << 30), 2 << 30, 3 << 30, address=step, operator="aten::empty")
    s.memory(t + 43, 1 << 30, 3 << 30, 4 << 30, address=step, operator="aten::empty")
    t += 70
    # an optimizer step with per-parameter kernels
    s.annotation("Optimizer.step#AdamW.step", t, 8 * 12 + 10)
    for j in range(8):
        name = ("vectorized_elementwise_kernel<lerp>" if j % 2 else
                "vectorized_elementwise_kernel<addcdiv>")
        s.kernel(name, t + 5 + j * 12, 6, launch=t + 2 + j * 12)
    t += 8 * 12 + 12
    if step % 4 == 3:  # a launch-bound stretch: short kernels, the GPU waiting for each launch
        for _ in range(40):
            s.kernel("vectorized_elementwise_kernel<fill>", t + 40, 3, launch=t + 38, stream=9)
            t += 45
    s.cpu[frame]["end_ns"] = int(t * 1000)
    s.step(step, start, t + 1 - start)
    return t + 5


#: Kernels of the run outside every step, per step of the trace (see _whole_program_tail).
TAIL_KERNELS_PER_STEP = 6


def _whole_program_tail(s: Synth, ids: _Clock, steps: int, t: float) -> None:
    """What a whole-program capture (``nsys profile python train.py``) adds after the loop: GPU
    work outside every step, here evaluation-like runs of short elementwise kernels between
    GEMMs, then one back-to-back run of same-sized elementwise kernels whose length grows with
    the trace (``TAIL_KERNELS_PER_STEP`` x steps). In the steps every run has a fixed length, so
    a detector that pairs the kernels of one run (a join on the run, the stream or a null step,
    filtered afterwards) grows linearly there; on this run it grows with the square of the
    trace, and the join checks below catch it."""
    t += 2000
    for i in range(steps):  # runs of 1-3 elementwise kernels between GEMMs: most runs are short
        for j in range(1 + i % 3):
            ext = ids.next_ext()
            _op(s, "aten::mul", t - 8, 6, ext=ext, dims=[[512, 512], [512, 512]],
                types=["c10::BFloat16", "c10::BFloat16"])
            s.kernel(f"vectorized_elementwise_kernel<op{j}>", t, 8, launch=t - 6, ext=ext,
                     op="aten::mul")
            t += 9
        s.kernel("ampere_bf16_s16816gemm_bf16_128x64", t, 30, launch=t - 6)
        t += 31
    t += 2000
    for _ in range(TAIL_KERNELS_PER_STEP * steps):
        s.kernel("vectorized_elementwise_kernel<add>", t, 5, launch=t - 4)
        t += 6


def build(steps: int) -> Trace:
    s = Synth(memory_bytes=150 * 2**30)
    s.devices.append(s.devices[0].__class__(id=1, name="NVIDIA H200", sm_count=132,
                                            compute_capability="9.0", vendor="nvidia",
                                            memory_bytes=150 * 2**30))
    ids = _Clock()
    t = 0.0
    for step in range(steps):
        t = _training_step(s, ids, step, t)
    _whole_program_tail(s, ids, steps, t)
    trace = s.trace()
    # The kernel rules read Nsight Compute's metrics: the committed pages' launches (each kernel
    # rule's bad kernel among them), one of them under a name the timeline has.
    from traceanalyzer.ingest.ncu import read_kernel_metrics

    ncu = Path(__file__).resolve().parents[2] / "sample_traces" / "ncu"
    metrics = pl.concat([read_kernel_metrics(ncu / f).metrics for f in (
        "kernels_a_raw.csv.gz", "kernels_b_raw.csv.gz", "kernels_c_raw.csv.gz")])
    metrics = metrics.with_columns(
        function=pl.when(pl.col("function") == "ta_copy_strided")
        .then(pl.lit(ATTENTION[1][0])).otherwise("function"))
    trace.meta.extra["kernel_metrics"] = metrics.to_dicts()
    return trace


def without_optimizer_ranges(trace: Trace) -> Trace:
    ann = trace.annotations.filter(~pl.col("name").str.starts_with("Optimizer.step"))
    return Trace(meta=trace.meta, **{**trace.frames(), "annotations": ann})


def _events(trace: Trace) -> int:
    return sum(frame.height for frame in trace.frames().values())


# --- recording what each join and explode makes ----------------------------------------------

_PACKAGE = str(Path(__file__).resolve().parents[2] / "traceanalyzer")
_inside = threading.local()


def _site() -> str:
    """The innermost line of traceanalyzer on the stack: where the operation is called from."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(_PACKAGE):
            return f"{Path(frame.filename).relative_to(Path(_PACKAGE).parent)}:{frame.lineno} ({frame.name})"
    return "(outside traceanalyzer)"


def _rows(frame: Any) -> int:
    if isinstance(frame, pl.LazyFrame):
        return int(frame.select(pl.len()).collect().item())
    return int(frame.height) if isinstance(frame, pl.DataFrame) else 0


class Recorder:
    """Patches the row-making operations of DataFrame and LazyFrame while it is on."""

    OPERATIONS = ("join", "join_asof", "join_where", "explode")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.records: list[tuple[str, str, int, int]] = []  # site, operation, rows in, rows out
        for cls in (pl.DataFrame, pl.LazyFrame):
            for name in self.OPERATIONS:
                monkeypatch.setattr(cls, name, self._wrap(cls, name, getattr(cls, name)))

    def _wrap(self, cls: type, name: str, original: Any) -> Any:
        recorder = self

        @functools.wraps(original)
        def wrapper(frame: Any, *args: Any, **kwargs: Any) -> Any:
            if not recorder.on or getattr(_inside, "depth", 0):
                return original(frame, *args, **kwargs)
            _inside.depth = 1  # an eager join runs a lazy one: count it once
            try:
                out = original(frame, *args, **kwargs)
                other = args[0] if args and name != "explode" else kwargs.get("other")
                rows_in = _rows(frame) + _rows(other)
                recorder.records.append((_site(), f"{cls.__name__}.{name}", rows_in, _rows(out)))
            finally:
                _inside.depth = 0
            return out

        return wrapper

    def run(self, trace: Trace) -> dict[str, Any]:
        """Every view and every rule (and the summaries) over ``trace``; the rules' outcomes."""
        self.records = []
        self.on = True
        try:
            views = Views(trace)
            for name in TABLE_NAMES:
                getattr(views, name)
            _ = views.metrics_by_rank
            result = analyze_trace(trace, rule_config=RuleConfig(overrides=LOW))
            # without optimizer ranges, the rules find the optimizer by its Adam kernels
            analyze_trace(without_optimizer_ranges(trace), rule_config=RuleConfig(overrides=LOW))
            # two ranks as one job: collectives matched across ranks
            analyze_job(combine([trace, trace]), rule_config=RuleConfig(overrides=LOW))
        finally:
            self.on = False
        return {o.slug: o for o in result.rule_outcomes}

    def largest_by_site(self) -> dict[str, tuple[str, int, int]]:
        out: dict[str, tuple[str, int, int]] = {}
        for site, op, rows_in, rows_out in self.records:
            if site not in out or rows_out > out[site][2]:
                out[site] = (op, rows_in, rows_out)
        return out


@pytest.fixture(scope="module")
def traces() -> tuple[Trace, Trace]:
    return build(N_STEPS), build(GROWTH * N_STEPS)


def test_every_rule_runs_its_whole_path_on_the_synthetic_trace(traces, monkeypatch):
    small, _ = traces
    outcomes = Recorder(monkeypatch).run(small)
    assert set(outcomes) == set(builtin_slugs())
    # startup-time judges what the window left out before the first step: a raw trace has no
    # window, so it stays quiet here (its detector only reads the window's summary).
    not_fired = {slug: (o.status, o.reason) for slug, o in outcomes.items()
                 if o.status != "fired" and slug != "startup-time"}
    assert not not_fired, f"every rule must fire on the synthetic trace: {not_fired}"


def test_no_intermediate_frame_grows_faster_than_the_trace(traces, monkeypatch):
    small, big = traces
    recorder = Recorder(monkeypatch)
    recorder.run(small)
    at_n = recorder.largest_by_site()
    recorder.run(big)
    at_8n = recorder.largest_by_site()
    events_n, events_8n = _events(small), _events(big)
    assert GROWTH * 0.9 <= events_8n / events_n <= GROWTH * 1.1
    # the patch must see the joins: the views' launches and the rules' as-of joins at least
    sites = " ".join(at_8n)
    for module in ("analysis/launches.py", "analysis/idle.py", "detectors/unfused_attention.py",
                   "detectors/_common.py"):
        assert module in sites, f"no join recorded in {module}: is the patch still in effect?"

    too_big = {site: (op, rows_out) for site, (op, _, rows_out) in at_8n.items()
               if rows_out > MAX_ROWS_PER_EVENT * events_8n}
    assert not too_big, (f"frames larger than {MAX_ROWS_PER_EVENT}x the trace's {events_8n} "
                         f"events: {too_big}")
    many = {site: (op, rows_in, rows_out) for site, op, rows_in, rows_out in recorder.records
            if "join" in op and rows_out > MAX_JOIN_GROWTH * max(rows_in, FLOOR_ROWS)}
    assert not many, (f"joins that made more than {MAX_JOIN_GROWTH}x the rows of their sides "
                      f"(site: operation, rows in, rows out): {many}")
    grew: dict[str, tuple[str, int, int]] = {}
    for site, (op, _, rows_out) in at_8n.items():
        before = at_n.get(site, (op, 0, 0))[2]
        if rows_out > FLOOR_ROWS and rows_out > GROWTH * (1 + SLACK) * max(before, FLOOR_ROWS / GROWTH):
            grew[site] = (op, before, rows_out)
    assert not grew, (f"outputs that grew more than {GROWTH}x from {N_STEPS} to "
                      f"{GROWTH * N_STEPS} steps (site: operation, rows at N, rows at 8N): "
                      f"{dict(grew)}")
