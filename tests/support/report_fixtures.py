"""Hand-built traces and analysis results for the report tests.

The reports read only :class:`AnalysisResult` (plus the GPU frame for the timeline), so these
fixtures build both directly, without an ingestor or the analysis, and let a test put any string
(hostile ones included) where a trace's strings would go.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analysis.result import AnalysisResult, Metrics
from traceanalyzer.findings import Finding, RuleOutcome
from traceanalyzer.model import Device, Trace, TraceMeta, conform, empty_frame

#: Strings a hostile trace could carry: each would run script if a report pasted it raw.
HOSTILE = [
    "<script>window.__pwned=1;alert(1)</script>",
    "</script><script>window.__pwned=2</script>",
    "\"><img src=x onerror=\"window.__pwned=3\">",
    "'><svg onload='window.__pwned=4'>",
    "</textarea><script>window.__pwned=5</script>",
    "javascript:window.__pwned=6",
    "</style><script>window.__pwned=7</script>",
    "<!-- \u2028 \u2029 & | * _ ` # [x](javascript:alert(1))",
]

US = 1_000


def make_trace(
    *,
    path: str = "/tmp/run/trace.json",
    kernel_names: list[str] | None = None,
    steps: int = 3,
    base_ns: int = 1_700_000_000_000_000,
    warnings: list[str] | None = None,
    source_format: str = "kineto",
) -> Trace:
    """A small two-stream trace: per step, kernels on stream 7 and one NCCL kernel on stream 20."""
    names = kernel_names or [
        "ampere_sgemm_128x64_tn",
        "void at::native::vectorized_elementwise_kernel<4>",
        "flash_fwd_kernel",
    ]
    cats = {"ampere_sgemm_128x64_tn": "gemm", "flash_fwd_kernel": "attention"}
    rows = []
    ann = []
    step_ns = 1_000 * US
    for s in range(steps):
        t0 = base_ns + s * step_ns
        ann.append({"rank": 0, "pid": 1, "tid": 1, "kind": "step", "name": f"ProfilerStep#{s}",
                    "start_ns": t0, "end_ns": t0 + step_ns, "step": s, "domain": None})
        t = t0 + 50 * US  # host-side gap at the start of every step
        for i, name in enumerate(names):
            dur = (100 + 40 * i) * US
            rows.append({"rank": 0, "device": 0, "stream": 7, "kind": "kernel", "name": name,
                         "category": cats.get(name, "elementwise"), "start_ns": t,
                         "end_ns": t + dur, "correlation": s * 100 + i})
            t += dur + 20 * US
        rows.append({"rank": 0, "device": 0, "stream": 20, "kind": "kernel",
                     "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "category": "communication",
                     "start_ns": t0 + 200 * US, "end_ns": t0 + 500 * US,
                     "correlation": s * 100 + 99})
        rows.append({"rank": 0, "device": 0, "stream": 7, "kind": "memcpy", "name": "Memcpy HtoD",
                     "category": "memcpy", "start_ns": t, "end_ns": t + 30 * US,
                     "correlation": s * 100 + 98, "bytes": 1 << 20, "copy_kind": "HtoD"})
    meta = TraceMeta(
        path=path,
        source_format=source_format,
        profiler="PyTorch Profiler",
        devices=[Device(id=0, name="NVIDIA H200", sm_count=132, memory_bytes=150 * 2**30,
                        compute_capability="9.0", vendor="nvidia")],
        rank=0,
        world_size=2,
        warnings=list(warnings or []),
    )
    return Trace(
        meta=meta,
        gpu=conform(pl.DataFrame(rows), "gpu"),
        cpu=empty_frame("cpu"),
        annotations=conform(pl.DataFrame(ann), "annotations"),
        syncs=empty_frame("syncs"),
        counters=empty_frame("counters"),
    )


def make_result(trace: Trace | None = None, *, extra_findings: list[Finding] | None = None,
                kernel_scale: float = 1.0) -> AnalysisResult:
    """An AnalysisResult consistent enough with ``make_trace`` for reports to show it."""
    trace = trace or make_trace()
    gpu = trace.gpu
    start = int(gpu["start_ns"].min())
    end = int(gpu["end_ns"].max())
    span = end - start
    kernels = (
        gpu.filter(pl.col("kind") == "kernel")
        .with_columns(dur=((pl.col("end_ns") - pl.col("start_ns")) * kernel_scale).cast(pl.Int64))
        .group_by("name", "category")
        .agg(
            instances=pl.len(),
            total_ns=pl.col("dur").sum(),
            mean_ns=pl.col("dur").mean(),
            median_ns=pl.col("dur").median(),
            min_ns=pl.col("dur").min(),
            max_ns=pl.col("dur").max(),
            stddev_ns=pl.col("dur").std(),
        )
        .with_columns(pct_gpu_time=100.0 * pl.col("total_ns") / pl.col("total_ns").sum())
        .with_columns(pl.col("category").cast(pl.String))
        .sort("total_ns", descending=True)
    )
    categories = (
        kernels.group_by("category")
        .agg(total_ns=pl.col("total_ns").sum(), count=pl.col("instances").sum())
        .with_columns(pct_gpu_time=100.0 * pl.col("total_ns") / pl.col("total_ns").sum())
        .sort("total_ns", descending=True)
    )
    steps_ann = trace.annotations.filter(pl.col("kind") == "step")
    steps = steps_ann.select(
        "step", "name", "start_ns", "end_ns",
        duration_ns=pl.col("end_ns") - pl.col("start_ns"),
        busy_ns=pl.lit(int(700 * US * kernel_scale)),
        idle_ns=pl.col("end_ns") - pl.col("start_ns") - int(700 * US * kernel_scale),
        idle_host_wait_ns=pl.lit(150 * US),
        idle_kernel_wait_ns=pl.lit(60 * US),
        idle_other_ns=pl.lit(90 * US),
        kernel_count=pl.lit(len(kernels) + 1),
    )
    n = 40
    util = pl.DataFrame({
        "bucket_start_ns": [start + i * span // n for i in range(n)],
        "bucket_end_ns": [start + (i + 1) * span // n for i in range(n)],
        "busy_pct": [50.0 + 45.0 * ((i * 7) % 10) / 10 for i in range(n)],
    })
    operators = pl.DataFrame({
        "name": ["aten::mm", "aten::add", kernels["name"][0]],
        "gpu_ns": [300 * US, 100 * US, 50 * US],
        "kernel_count": [3, 3, 1],
        "calls": [3, 3, 1],
    })
    streams = pl.DataFrame({
        "device": [0, 0], "stream": [7, 20], "kernel_count": [9, 3],
        "busy_ns": [1500 * US, 900 * US], "idle_host_wait_ns": [300 * US, 0],
        "idle_kernel_wait_ns": [100 * US, 0], "idle_other_ns": [50 * US, 2000 * US],
    })
    metrics = Metrics(
        rank=0, window_start_ns=start, window_end_ns=end, span_ns=span,
        busy_ns=int(span * 0.7), idle_ns=span - int(span * 0.7),
        idle_host_wait_ns=int(span * 0.15), idle_kernel_wait_ns=int(span * 0.05),
        idle_other_ns=int(span * 0.1), compute_ns=int(span * 0.5),
        communication_ns=int(span * 0.3), memory_ns=int(span * 0.03),
        exposed_communication_ns=int(span * 0.1), comm_overlap_pct=66.6667,
        kernel_count=int(kernels["instances"].sum()), memcpy_count=3, memset_count=0,
        step_count=steps.height, kernels_per_step=4.0, step_time_mean_ns=1e6 * kernel_scale,
        step_time_p50_ns=1e6 * kernel_scale, step_time_p95_ns=1.1e6 * kernel_scale,
        launch_delay_mean_ns=12_345.678, launch_delay_p50_ns=10_000.0,
        launch_delay_p95_ns=30_000.0, launch_overhead_pct=3.21,
    )
    name0 = kernels["name"][0]
    findings = [
        Finding(
            slug="gpu-idle-gaps", rule_id="TA001", severity="high", title="GPU idle gaps",
            message=f"GPU idle 30% of the window; largest gap before {name0}",
            fix="Overlap data loading with compute; use CUDA graphs.",
            impact_ns=int(span * 0.3), impact_pct=30.0, impact_per_step_ns=300 * US, rank=0,
            evidence=[
                {"start_ns": start + 1000 * US, "end_ns": start + 1050 * US, "stream": 7,
                 "gap_ns": 50 * US, "next_kernel": name0},
                {"start_ns": start + 2000 * US, "end_ns": start + 2050 * US, "stream": 7,
                 "gap_ns": 50 * US, "next_kernel": name0},
            ],
            references=["https://example.org/idle", "javascript:alert(1)"],
        ),
        Finding(
            slug="exposed-communication", rule_id="TA004", severity="medium",
            title="Exposed communication",
            message="10% of the window is NCCL not overlapped with compute",
            fix="Bucket gradients; overlap all-reduce with backward.",
            impact_ns=int(span * 0.1), impact_pct=10.0, impact_per_step_ns=100 * US, rank=0,
            evidence=[{"start_ns": start + 150 * US, "end_ns": start + 450 * US, "stream": 20,
                       "kernel": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"}],
        ),
    ] + list(extra_findings or [])
    outcomes = [
        RuleOutcome("gpu-idle-gaps", "TA001", "fired"),
        RuleOutcome("exposed-communication", "TA004", "fired"),
        RuleOutcome("small-kernels", "TA002", "quiet", "no step launches >50% tiny kernels"),
        RuleOutcome("pageable-memcpy", "TA007", "not_applicable",
                    "the trace records no memcpy memory kinds"),
    ]
    return AnalysisResult(
        meta=trace.meta, metrics=metrics, steps=steps, kernels=kernels, categories=categories,
        operators=operators, utilization=util, streams=streams, findings=findings,
        rule_outcomes=outcomes,
    )


def hostile_trace_and_result() -> tuple[Trace, AnalysisResult]:
    """A trace whose file name, kernel names, warnings and findings all carry HOSTILE strings."""
    trace = make_trace(
        path="/tmp/" + HOSTILE[0].replace("/", "_") + ".json",
        kernel_names=HOSTILE[:6],
        warnings=HOSTILE[5:],
    )
    from dataclasses import replace

    trace.meta.devices = [replace(trace.meta.devices[0], name=HOSTILE[2])]
    trace.meta.profiler = HOSTILE[1]
    trace.meta.extra = {HOSTILE[0]: HOSTILE[2], "nested": {"k": HOSTILE[1]}}
    trace.annotations = trace.annotations.with_columns(
        name=pl.lit(HOSTILE[4]), step=pl.int_range(pl.len(), dtype=pl.Int64))
    extra = Finding(
        slug="evil<script>", rule_id="TA<b>9", severity="low", title=HOSTILE[1],
        message=HOSTILE[2], fix=HOSTILE[4], impact_ns=5, impact_pct=0.001,
        evidence=[{"start_ns": int(trace.gpu["start_ns"][0]), "end_ns":
                   int(trace.gpu["end_ns"][0]), HOSTILE[3]: HOSTILE[6], "stream": 7}],
        references=[HOSTILE[5]],
    )
    result = make_result(trace, extra_findings=[extra])
    result.rule_outcomes.append(RuleOutcome("evil<script>", "TA<b>9", "not_applicable", HOSTILE[7]))
    return trace, result


def huge_trace_and_result(n_kernels: int = 400_000, n_names: int = 20_000,
                          n_steps: int = 2_000) -> tuple[Trace, AnalysisResult]:
    """A trace and result far past every report limit (kernels, names, steps, evidence rows)."""
    base = 1_000_000_000_000
    idx = pl.int_range(0, n_kernels, eager=True)
    gpu = pl.DataFrame({
        "rank": pl.repeat(0, n_kernels, eager=True),
        "device": (idx % 2).cast(pl.Int32),
        "stream": (idx % 8) + 7,
        "kind": pl.repeat("kernel", n_kernels, eager=True),
        "name": ("kernel_" + (idx % n_names).cast(pl.String) + "_" + "x" * 200),
        "category": pl.repeat("gemm", n_kernels, eager=True),
        "start_ns": base + idx * 1_000,
        "end_ns": base + idx * 1_000 + 900,
    })
    meta = make_trace().meta
    trace = Trace(meta=meta, gpu=conform(gpu, "gpu"), cpu=conform(pl.DataFrame(), "cpu"),
                  annotations=conform(pl.DataFrame(), "annotations"),
                  syncs=conform(pl.DataFrame(), "syncs"), counters=conform(pl.DataFrame(), "counters"))
    r = make_result(make_trace())
    step_ns = n_kernels * 1_000 // n_steps
    r.steps = pl.DataFrame({"step": range(n_steps), "name": [f"ProfilerStep#{i}" for i in
                                                             range(n_steps)],
                            "start_ns": [base + i * step_ns for i in range(n_steps)],
                            "end_ns": [base + (i + 1) * step_ns for i in range(n_steps)],
                            "duration_ns": [step_ns] * n_steps, "busy_ns": [step_ns // 2] * n_steps,
                            "idle_ns": [step_ns // 2] * n_steps,
                            "idle_host_wait_ns": [step_ns // 4] * n_steps,
                            "idle_kernel_wait_ns": [step_ns // 8] * n_steps,
                            "idle_other_ns": [step_ns // 8] * n_steps, "kernel_count": [200] * n_steps})
    r.kernels = gpu.group_by("name").agg(instances=pl.len(), total_ns=pl.len() * 900).with_columns(
        category=pl.lit("gemm"), mean_ns=pl.lit(900.0), pct_gpu_time=pl.lit(0.005))
    r.utilization = pl.DataFrame({"bucket_start_ns": [base + i * 4_000 for i in range(100_000)],
                                  "bucket_end_ns": [base + (i + 1) * 4_000 for i in range(100_000)],
                                  "busy_pct": [float(i % 100) for i in range(100_000)]})
    r.metrics.window_start_ns = base
    ev = [{"start_ns": base + i * 1_000, "end_ns": base + i * 1_000 + 100, "stream": 7,
           "kernel": "y" * 300} for i in range(2_000)]
    r.findings = [Finding(f"rule-{j}", f"TA{j:03d}", "medium", "t", "m", "f", 10 - j, 1.0,
                          evidence=ev) for j in range(8)]
    return trace, r
