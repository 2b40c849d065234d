"""The canonical trace model: the frames every ingestor produces and every analysis reads.

Every ingestor (Kineto/Chrome JSON, Nsight Systems SQLite, Perfetto protobuf) returns a
:class:`Trace` whose frames have exactly the schemas below, column for column and dtype for dtype.
Analyses read only these frames; nothing downstream knows which format a trace came from.

Conventions, for all frames:

- Times are int64 nanoseconds on the trace's own clock (``start_ns``/``end_ns``, end exclusive).
  Absolute values are kept as the profiler wrote them; only differences carry meaning.
- ``rank`` is the distributed rank the trace belongs to (0 when unknown), so frames of several
  ranks can be concatenated and still be told apart.
- Missing values are null, never a sentinel such as -1.
- Strings come from the trace and are untrusted: escape them before they reach HTML or a terminal.

The schemas are documented for users in ``docs/canonical-model.md``; keep the two in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import polars as pl
from polars.datatypes import DataTypeClass

#: Kernel categories, in the order reports list them.
CATEGORIES: tuple[str, ...] = (
    "gemm",
    "attention",
    "elementwise",
    "reduction",
    "norm",
    "embedding",
    "optimizer",
    "communication",
    "memcpy",
    "memset",
    "other",
)

#: How to get operator shapes, by the trace's format (TraceMeta.source_format): only
#: torch.profiler records them, so "profile with record_shapes=True" is advice for its traces
#: alone (rules' reasons and the MFU line say this one).
SHAPES_HINTS: dict[str, str] = {
    "kineto": "profile with record_shapes=True",
    "nsys": "Nsight Systems records none; a torch.profiler trace with record_shapes=True has them",
    "perfetto": "this Perfetto trace records none; a torch.profiler trace with record_shapes=True "
                "has them",
    "ncu": "an Nsight Compute report holds kernels, not operators; its own FLOP counts give each "
           "kernel's roofline point",
}


def shapes_hint(source_format: str | None) -> str:
    """Where operator shapes come from, in words that hold for a trace of ``source_format``."""
    return SHAPES_HINTS.get(source_format or "", SHAPES_HINTS["kineto"])


#: Kinds of GPU activity.
GPU_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")

#: Kinds of CPU activity.
CPU_KINDS: tuple[str, ...] = ("op", "runtime", "driver", "python", "other")
#: CPU kinds of CUDA/HIP API calls: the ones that launch GPU work and carry its correlation id.
API_KINDS: tuple[str, ...] = ("runtime", "driver")

#: Kinds of annotation.
ANNOTATION_KINDS: tuple[str, ...] = ("step", "user", "gpu_user", "nvtx")

#: A column's dtype as the package writes it: a class (``pl.Int64``) or an instance
#: (``pl.Struct(...)``). Polars accepts both wherever a schema is given.
DType: TypeAlias = pl.DataType | DataTypeClass

#: Memory copy directions, named as Nsight Systems and Kineto name them.
COPY_KINDS: tuple[str, ...] = ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "other")

#: Memory kinds of a copy's source or destination.
MEMORY_KINDS: tuple[str, ...] = ("pageable", "pinned", "device", "managed", "array", "other")

GPU_ACTIVITY_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,  # distributed rank (0 when unknown)
        "device": pl.Int32,  # GPU index on its host
        "stream": pl.Int64,  # CUDA/HIP stream id
        "kind": pl.Enum(GPU_KINDS),
        "name": pl.String,  # kernel name, demangled (traceanalyzer.demangle) when recorded mangled
        "category": pl.Enum(CATEGORIES),  # see traceanalyzer.categories
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "correlation": pl.Int64,  # links the activity to the CPU runtime call that launched it
        "external_id": pl.Int64,  # Kineto's link to the CPU operator (null elsewhere)
        "grid_x": pl.Int32,
        "grid_y": pl.Int32,
        "grid_z": pl.Int32,
        "block_x": pl.Int32,
        "block_y": pl.Int32,
        "block_z": pl.Int32,
        "registers": pl.Int32,  # registers per thread
        "shared_mem": pl.Int64,  # bytes of shared memory per block (static + dynamic)
        "bytes": pl.Int64,  # bytes copied or set (memcpy/memset only)
        "copy_kind": pl.Enum(COPY_KINDS),  # memcpy only
        "src_kind": pl.Enum(MEMORY_KINDS),  # memcpy/memset only, where recorded
        "dst_kind": pl.Enum(MEMORY_KINDS),
        "graph_launched": pl.Boolean,  # launched as part of a CUDA graph, where recorded
        "mangled_name": pl.String,  # the name as recorded, where ``name`` is its demangled form
    }
)

CPU_ACTIVITY_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "kind": pl.Enum(CPU_KINDS),  # op = framework operator, runtime/driver = CUDA/HIP API call
        "name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "correlation": pl.Int64,  # runtime/driver calls: the id shared with the GPU activity
        "external_id": pl.Int64,  # Kineto: links runtime calls to the operator that made them
        "input_dims": pl.String,  # JSON text, ", "-separated, e.g. "[[8, 1024], [1024, 1024]]"
        "input_types": pl.String,  # JSON text, e.g. '["float", "c10::BFloat16"]'
        "call_stack": pl.String,  # Python stack, innermost frame first, ';'-separated
        "parent_op": pl.String,  # name of the outermost framework operator enclosing this call
        # Kineto, record_shapes=True: the scalar arguments as JSON text, "" for each tensor, e.g.
        # '["", "", "", "", "0.", "True", "", "False"]' (is_causal of an SDPA call)
        "concrete_inputs": pl.String,
        "flops": pl.Int64,  # Kineto, with_flops=True: the FLOPs torch counted for the call
    }
)

ANNOTATION_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "pid": pl.Int64,
        "tid": pl.Int64,  # null for GPU-side annotations
        "kind": pl.Enum(ANNOTATION_KINDS),
        "name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,  # equal to start_ns for instant marks
        "step": pl.Int64,  # N of ``ProfilerStep#N``; null for other annotations
        "domain": pl.String,  # NVTX domain where recorded
    }
)

#: Host-device synchronisations recorded on the GPU side (CUPTI synchronization records).
SYNC_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "device": pl.Int32,
        "stream": pl.Int64,
        "sync_type": pl.String,  # "stream", "event", "context", "stream_wait", or as recorded
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "correlation": pl.Int64,
    }
)

#: Counters and memory events: one row per sample.
COUNTER_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "pid": pl.Int64,
        "device": pl.Int32,  # null for host counters
        "name": pl.String,  # e.g. "allocated_bytes", "reserved_bytes", or a counter's own name
        "ts_ns": pl.Int64,
        "value": pl.Float64,
    }
)

#: Where a memory row comes from: the framework's caching allocator (torch.profiler's
#: ``[memory]`` events), or the driver's device allocations (Nsight Systems' memory usage events,
#: Perfetto's GPU memory counter).
MEMORY_SOURCES: tuple[str, ...] = ("allocator", "driver")

#: Device memory allocations and frees: one row per event (docs/canonical-model.md).
MEMORY_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "pid": pl.Int64,
        "tid": pl.Int64,  # the allocating thread, where recorded
        "device": pl.Int32,  # null for host (pinned) memory
        "ts_ns": pl.Int64,
        "source": pl.Enum(MEMORY_SOURCES),
        "bytes": pl.Int64,  # > 0 allocated, < 0 freed
        "address": pl.Int64,  # where recorded: pairs an allocation with its free
        "allocated_bytes": pl.Int64,  # the device's total allocated after the event
        "reserved_bytes": pl.Int64,  # the device's total reserved after the event
        "operator": pl.String,  # the innermost framework operator around the event
        "api": pl.String,  # the runtime call that made it (cudaMalloc, cudaFree, ...), where known
    }
)

FRAME_SCHEMAS: dict[str, pl.Schema] = {
    "gpu": GPU_ACTIVITY_SCHEMA,
    "cpu": CPU_ACTIVITY_SCHEMA,
    "annotations": ANNOTATION_SCHEMA,
    "syncs": SYNC_SCHEMA,
    "counters": COUNTER_SCHEMA,
    "memory": MEMORY_SCHEMA,
}


@dataclass(frozen=True)
class Device:
    """One GPU as the profiler described it."""

    id: int
    name: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    compute_capability: str | None = None  # "9.0"
    vendor: str | None = None  # "nvidia" or "amd"


@dataclass
class TraceMeta:
    """What the trace says about itself."""

    path: str
    source_format: str  # "kineto", "nsys", "perfetto"
    profiler: str | None = None  # "PyTorch Profiler", "Nsight Systems 2025.3.1", ...
    devices: list[Device] = field(default_factory=list)
    rank: int = 0
    world_size: int = 1
    #: Offset that turns trace times into Unix epoch nanoseconds, where the trace records it.
    time_base_ns: int | None = None
    #: Recoverable problems met while reading (truncation, orphan events, duplicates).
    warnings: list[str] = field(default_factory=list)
    #: Format-specific extras worth showing (distributed info, versions); JSON-serialisable.
    extra: dict[str, Any] = field(default_factory=dict)

    def device(self, device_id: int | None) -> Device | None:
        for dev in self.devices:
            if dev.id == device_id:
                return dev
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "source_format": self.source_format,
            "profiler": self.profiler,
            "devices": [vars(d) for d in self.devices],
            "rank": self.rank,
            "world_size": self.world_size,
            "time_base_ns": self.time_base_ns,
            "warnings": list(self.warnings),
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceMeta:
        fields = dict(data)
        fields["devices"] = [Device(**d) for d in fields.get("devices", [])]
        return cls(**fields)


@dataclass
class Trace:
    """A trace in canonical form: its metadata and its six frames."""

    meta: TraceMeta
    gpu: pl.DataFrame
    cpu: pl.DataFrame
    annotations: pl.DataFrame
    syncs: pl.DataFrame
    counters: pl.DataFrame
    memory: pl.DataFrame = field(default_factory=lambda: empty_frame("memory"))

    def frames(self) -> dict[str, pl.DataFrame]:
        return {name: getattr(self, name) for name in FRAME_SCHEMAS}

    def validate(self) -> None:
        """Raise ``ValueError`` if a frame does not have its canonical schema."""
        for name, frame in self.frames().items():
            expected = FRAME_SCHEMAS[name]
            if frame.schema != expected:
                raise ValueError(
                    f"frame {name!r} has schema {dict(frame.schema)}, expected {dict(expected)}"
                )


#: The Polars engine of every query the package collects. ``collect()``'s default ("auto") picks
#: the streaming engine, whose start-up dominates the many small queries of an ingest or an
#: analysis; the in-memory engine measured faster at every size here (bench/NOTES.md, round 5).
COLLECT_ENGINE: Final = "in-memory"

#: Every start and end lies within this distance of the trace clock's zero (2^62 ns, 146 years),
#: so that any end and any difference of two times fits in int64: readers drop records beyond
#: it (:mod:`traceanalyzer.ingest.bounds`).
TIME_LIMIT_NS: Final = 1 << 62


def empty_frame(name: str) -> pl.DataFrame:
    """An empty frame with the canonical schema of ``name``."""
    return pl.DataFrame(schema=FRAME_SCHEMAS[name])


def conform_lazy(frame: pl.DataFrame | pl.LazyFrame, name: str,
                 exclude: tuple[str, ...] = (),
                 dtypes: Mapping[str, DType] | None = None) -> pl.LazyFrame:
    """Select and cast ``frame``'s columns into the canonical schema of ``name``, lazily.

    Columns the frame lacks are added as nulls, so an ingestor only builds what its format has.
    ``exclude`` leaves out columns an ingestor fills in later; ``dtypes`` keeps some columns in
    another type for a while (e.g. names as categories until the last sort).
    """
    lazy = frame.lazy()
    have = lazy.collect_schema().names()
    dtypes = dtypes or {}
    return lazy.select(
        (pl.col(col) if col in have else pl.lit(None))
        .cast(dtypes.get(col, dtype), strict=False).alias(col)
        for col, dtype in FRAME_SCHEMAS[name].items()
        if col not in exclude
    )


def conform(frame: pl.DataFrame | pl.LazyFrame, name: str) -> pl.DataFrame:
    """:func:`conform_lazy`, collected."""
    return conform_lazy(frame, name).collect(engine=COLLECT_ENGINE)


def empty_trace(meta: TraceMeta) -> Trace:
    return Trace(meta=meta, **{name: empty_frame(name) for name in FRAME_SCHEMAS})


def _kernel_metrics_schema() -> pl.Schema:
    i32, i64, f64, s = pl.Int32(), pl.Int64(), pl.Float64(), pl.String()
    stalls = ("long_scoreboard", "short_scoreboard", "barrier", "membar", "mio_throttle",
              "lg_throttle", "tex_throttle", "math_pipe_throttle", "wait", "not_selected",
              "selected", "no_instruction", "branch_resolving", "dispatch_stall", "drain",
              "imc_miss", "sleeping", "gmma", "misc")
    cols: list[tuple[str, pl.DataType]] = [
        ("id", i64), ("process_id", i64), ("device", i32), ("stream", i64), ("name", s),
        ("function", s), ("compute_capability", s),
        *((f"{k}_{a}", i32) for k in ("grid", "block") for a in "xyz"),
        ("registers", i32), ("shared_mem", i64), ("shared_mem_static", i64),
        ("shared_mem_dynamic", i64), ("duration_ns", i64), ("sm_count", i32),
        ("waves_per_sm", f64), ("sm_clock_hz", f64),
        *((c, f64) for c in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct",
                             "l1_throughput_pct", "l2_throughput_pct", "l1_hit_rate_pct",
                             "l2_hit_rate_pct")),
        ("dram_bytes_read", i64), ("dram_bytes_write", i64), ("dram_bytes", i64),
        ("achieved_occupancy_pct", f64), ("theoretical_occupancy_pct", f64),
        ("occupancy_limiter", s),
        *((f"block_limit_{k}", i32) for k in ("registers", "shared_mem", "warps", "sm",
                                              "barriers")),
        *(c for op in ("load", "store") for c in (
            (f"global_{op}_requests", i64), (f"global_{op}_sectors", i64),
            (f"global_{op}_sectors_per_request", f64), (f"global_{op}_efficiency_pct", f64))),
        *((f"shared_{op}_{k}", i64) for k in ("requests", "wavefronts", "bank_conflicts")
          for op in ("load", "store")),
        ("local_load_sectors", i64), ("local_store_sectors", i64), ("local_bytes", i64),
        ("spill_requests", i64), ("spill_requests_pct", f64),
        ("warp_cycles_per_issue", f64), *((f"stall_{r}", f64) for r in stalls),
        *((c, f64) for c in ("tensor_pipe_pct", "fp32_pipe_pct", "fp64_pipe_pct",
                             "fp16_pipe_pct", "flop_per_s", "tensor_flop_per_s",
                             "dram_bytes_per_s", "dram_peak_bytes_per_s",
                             "arithmetic_intensity")),
    ]
    return pl.Schema(cols)


#: ``kernel_metrics``: one row per kernel launch profiled by Nsight Compute
#: (:mod:`traceanalyzer.ingest.ncu`; columns in docs/canonical-model.md). Not a frame of every
#: trace: it travels in ``TraceMeta.extra["kernel_metrics"]`` (:func:`kernel_metrics_frame`).
KERNEL_METRICS_SCHEMA: Final = _kernel_metrics_schema()


def kernel_metrics_frame(meta: TraceMeta) -> pl.DataFrame:
    """The ``kernel_metrics`` a trace carries (rows in ``meta.extra["kernel_metrics"]``, put
    there by the Nsight Compute reader or ``--kernel-metrics``), empty when it has none."""
    rows = meta.extra.get("kernel_metrics")
    if not isinstance(rows, list) or not rows:
        return pl.DataFrame(schema=KERNEL_METRICS_SCHEMA)
    return pl.DataFrame(rows, schema=KERNEL_METRICS_SCHEMA, strict=False)
