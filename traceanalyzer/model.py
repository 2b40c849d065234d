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
    "optimizer",
    "communication",
    "memcpy",
    "memset",
    "other",
)

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
                 dtypes: dict[str, DType] | None = None) -> pl.LazyFrame:
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
