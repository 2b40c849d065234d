"""Small canonical traces built by hand (times in µs) and a runner that checks what every
finding must have: the shared builders of the rules' tests (tests/rules/) and of the tests that
compare the job view with a rule."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from traceanalyzer.analysis.views import Views
from traceanalyzer.categories import activity_category
from traceanalyzer.model import Device, Trace, TraceMeta, conform
from traceanalyzer.rules import RuleConfig, evaluate

US = 1_000
#: A communication kernel, as NCCL names its all-reduce.
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


class Synth:
    """A tiny trace in canonical frames. Times are given in µs."""

    def __init__(self, sm_count: int | None = 132, cc: str | None = "9.0",
                 memory_bytes: int | None = None) -> None:
        self.gpu: list[dict[str, Any]] = []
        self.mem: list[dict[str, Any]] = []
        self.cpu: list[dict[str, Any]] = []
        self.ann: list[dict[str, Any]] = []
        self.corr = 0
        self.devices = [Device(id=0, name="NVIDIA H200", sm_count=sm_count, compute_capability=cc,
                               vendor="nvidia", memory_bytes=memory_bytes)]

    def _base(self) -> dict[str, Any]:
        return {"rank": 0, "pid": 1, "tid": 1}

    def op(self, name: str, start: float, dur: float, *, ext: int | None = None,
           dims: Any = None, types: Any = None, kind: str = "op", concrete: Any = None,
           flops: int | None = None) -> None:
        """A CPU operator; ``concrete`` (Concrete Inputs) and ``flops`` as Kineto records them
        with record_shapes=True and with_flops=True."""
        self.cpu.append({**self._base(), "kind": kind, "name": name, "start_ns": int(start * US),
                         "end_ns": int((start + dur) * US), "external_id": ext,
                         "input_dims": json.dumps(dims) if dims is not None else None,
                         "input_types": json.dumps(types) if types is not None else None,
                         "concrete_inputs": json.dumps(concrete) if concrete is not None else None,
                         "flops": flops})

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

    def memory(self, ts: float, nbytes: int, allocated: int | None, reserved: int, *,
               address: int | None = None, operator: str | None = None,
               source: str = "allocator", device: int = 0) -> None:
        """A device memory event: ``nbytes`` allocated (> 0) or freed (< 0), then the device's
        totals (``allocated`` is None for the driver's rows, which do not see it)."""
        self.mem.append({**self._base(), "device": device, "ts_ns": int(ts * US),
                         "source": source, "bytes": nbytes, "address": address,
                         "allocated_bytes": allocated, "reserved_bytes": reserved,
                         "operator": operator})

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
            "memory": conform(pl.DataFrame(self.mem, infer_schema_length=None), "memory")
            if self.mem else conform(pl.DataFrame({"rank": []}), "memory"),
        }
        trace = Trace(meta=TraceMeta(path="synthetic", source_format="kineto",
                                     devices=self.devices), **frames)
        trace.validate()
        return trace


def run(synth: Synth, **overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Findings and outcomes by slug, with the properties every finding must have checked."""
    views = Views(synth.trace())
    findings, outcomes = evaluate(views, RuleConfig(overrides=dict(overrides)))
    for f in findings:
        # each rank's finding is judged against that rank's own window
        own = views.for_rank(f.rank).window if f.rank is not None else views.window
        assert 0 <= f.impact_ns <= (own[1] - own[0] if own else 0)
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


def steps_with_exposed_allreduce(s: Synth, durations: list[float]) -> None:
    """One step per duration: 2 ms of compute, then an all-reduce of that duration beside no
    compute (exposed), launched with the compute."""
    t = 0.0
    for n, dur in enumerate(durations):
        end = busy_loop(s, n=10, start=t)
        s.kernel(NCCL, end + 2, dur, launch=t + 1, stream=20)
        s.step(n, t - 1, end + 2 + dur + 5 - (t - 1))
        t = end + 2 + dur + 10
