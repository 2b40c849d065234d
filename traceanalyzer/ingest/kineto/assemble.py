"""Assemble the canonical frames of a trace from its reduced chunks.

What needs every event waits for this step: the parent-op and launch joins, deduplication of GPU
rows, sorting, and the categories of kernel names. Two twins do it:

- :func:`assemble` in Polars, the reference, for every trace;
- :func:`compiled_frames`, the compiled pass (``_native/_eventassemble.c``) when it is built, for
  a trace read as one group of chunks the compiled reduction took (up to
  ``reader.FIRST_GROUP_BYTES``). Their assembly does little work, but in Polars it is a dozen
  kinds of query, and a fresh process pays for each kind the first time it runs one, which made
  a small trace's MB/s half a large one's (bench/NOTES.md, round 15). It gives the CPU, GPU,
  annotation and sync frames the reference gives, or None, and the caller then uses the
  reference. Larger traces are reduced in several groups, their text as categories to keep
  memory down, and assembled by Polars, where that cost is small beside the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import polars as pl

from traceanalyzer.categories import KERNEL_PATTERNS, activity_category
from traceanalyzer.ingest.column_codes import LETTER_OF, LayoutLetter
from traceanalyzer.ingest.kineto import reduce
from traceanalyzer.ingest.kineto.reduce import (
    COMPILED_COLUMNS,
    Parts,
    Reduced,
    ReducedTable,
    batches_frame,
    compiled_parts,
    kept,
    reduce_frame,
)
from traceanalyzer.ingest.memory import innermost_operator
from traceanalyzer.model import (
    API_KINDS,
    COLLECT_ENGINE,
    COPY_KINDS,
    FRAME_SCHEMAS,
    MEMORY_KINDS,
    Trace,
    TraceMeta,
    conform,
    conform_lazy,
    empty_frame,
)
from traceanalyzer.texts import categories_as_text

try:
    from traceanalyzer.ingest.kineto._native import _eventassemble
except ImportError:  # pragma: no cover - depends on how the package was installed
    _eventassemble = None  # type: ignore[assignment]

AVAILABLE = _eventassemble is not None and reduce.AVAILABLE

#: Frames of this many rows and more are sorted a few columns at a time (see
#: _cpu_frame_by_column) ...
COLUMNWISE_ROWS = 1 << 18
COLUMNS_AT_ONCE = 2  # ... this many, side by side


# --- the reference, in Polars --------------------------------------------------------------


def build_trace(events: pl.DataFrame, meta: TraceMeta) -> Trace:
    """Canonical frames from decoded events (``EVENT_SCHEMA``, any phase) in one piece."""
    return assemble([reduce_frame(kept(events))], meta)


def assemble(parts: list[Parts | Reduced], meta: TraceMeta) -> Trace:
    """The trace from its reduced groups, in order: compiled for a trace read as one group the
    compiled reduction took, else by Polars."""
    untimed = sum(p.untimed for p in parts)
    if untimed:
        meta.warnings.append(f"skipped {untimed} events without a usable timestamp (ts missing, "
                             "not a number, or start or end beyond ±2^62 ns)")
    negative = sum(p.negative for p in parts)
    if negative:
        meta.warnings.append(f"{negative} events have a negative duration or one that is not a "
                             "usable number (NaN, infinite, beyond ±2^62 ns); treated as "
                             "zero-length")
    if len(parts) == 1 and isinstance(parts[0], Reduced):  # one group, reduced in C
        trace = assemble_compiled(parts[0].tables, meta)
        if trace is not None:
            return trace
    parts = [compiled_parts(*p) if isinstance(p, Reduced) else p for p in parts]

    def cat(name: str) -> pl.DataFrame:
        # Each chunk's piece is released as soon as it is part of the whole.
        pieces = [getattr(p, name) for p in parts]
        for p in parts:
            setattr(p, name, None)
        return pl.concat(pieces, how="vertical_relaxed", rechunk=False)

    rank = pl.lit(meta.rank, pl.Int32)
    cpu, gpu = _cpu_and_gpu_frames([cat("cpu").with_columns(rank=rank)],
                                   cat("gpu").with_columns(rank=rank), meta)
    memory = cat("memory").with_columns(rank=rank)
    return Trace(
        meta=meta,
        gpu=gpu,
        cpu=cpu,
        annotations=cat("annotations").with_columns(rank=rank).sort("start_ns", maintain_order=True),
        syncs=cat("syncs").with_columns(rank=rank).sort("start_ns", maintain_order=True),
        counters=_counter_frame(memory),
        memory=_memory_frame(memory, cpu),
    )


def assemble_compiled(tables: list[ReducedTable], meta: TraceMeta) -> Trace | None:
    """The frames from the compiled assembly (:func:`compiled_frames`; the same frames as the
    Polars assembly: tested), or None where it declines."""
    assembled = compiled_frames(tables, meta.rank)
    if assembled is None:
        return None
    without_launch, frames = assembled
    if frames["gpu"].height:
        meta.extra["gpu_without_launch"] = without_launch
    layout, batches = tables[Parts.TABLES.index("memory")]
    counters, memory = empty_frame("counters"), empty_frame("memory")
    if any(rows for rows, _ in batches):
        events = batches_frame(layout, COMPILED_COLUMNS[-1], batches)
        events = events.with_columns(rank=pl.lit(meta.rank, pl.Int32))
        counters, memory = _counter_frame(events), _memory_frame(events, frames["cpu"])
    return Trace(meta=meta, counters=counters, memory=memory, **frames)


def _cpu_and_gpu_frames(cpu_rows: list[pl.DataFrame], gpu_rows: pl.DataFrame,
                        meta: TraceMeta) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The CPU and GPU frames. ``cpu_rows`` holds the only reference to the CPU rows, which a
    big trace's CPU frame drops column by column as it builds them."""
    rows = cpu_rows[0]
    gpu = None if gpu_rows.is_empty() else _gpu_plan(gpu_rows, _launches(rows.lazy()))
    if rows.height < COLUMNWISE_ROWS:
        # One collect for both frames: Polars runs the two queries side by side, where one after
        # the other left a core idle (each is too small to keep two busy on its own).
        lazy = rows.lazy()
        joined = pl.concat([lazy, _parent_ops(lazy)], how="horizontal")
        texts = _categories_kept(joined.collect_schema())
        cpu_plan = conform_lazy(joined.sort("start_ns", maintain_order=True), "cpu", dtypes=texts)
        cpu, *collected = pl.collect_all([cpu_plan] + ([gpu] if gpu is not None else []),
                                         engine=COLLECT_ENGINE)
        cpu = cpu.with_columns(categories_as_text(cpu[col]) for col in texts)
        gpu_frame = collected[0] if collected else None
    else:
        # The GPU frame first, while the CPU rows are still compact: the CPU frame is the peak.
        gpu_frame = gpu.collect(engine=COLLECT_ENGINE) if gpu is not None else None
        del rows, gpu
        cpu = _cpu_frame_by_column(cpu_rows.pop())
    if gpu_frame is None:
        return cpu, empty_frame("gpu")
    return cpu, _deduplicated_gpu(gpu_frame, gpu_rows.height, meta)


def _cpu_frame_by_column(cpu: pl.DataFrame) -> pl.DataFrame:
    # Eager, a few columns at a time: a lazy join and sort of the whole frame cost several times
    # the frame's size in transient memory (the ingest's peak).
    cpu = cpu.with_columns(_parent_ops(cpu.lazy()).collect(engine=COLLECT_ENGINE).to_series())
    # A stable sort (ties in start_ns stay in file order: chunks arrive in order) and the cast to
    # the canonical types, a few columns at a time: each is dropped from the input as soon as
    # its sorted copy exists, so the frame is never held twice (the ingest's memory peak), and
    # the columns of one step are gathered side by side (one at a time left a core idle).
    order = cpu.select(pl.arg_sort_by("start_ns", maintain_order=True)).to_series()
    schema = FRAME_SCHEMAS["cpu"]
    names = list(schema)
    columns: dict[str, pl.Series] = {}
    for start in range(0, len(names), COLUMNS_AT_ONCE):
        step = [col for col in names[start:start + COLUMNS_AT_ONCE] if col in cpu.columns]
        texts = _categories_kept(cpu.select(step).schema)
        sorted_step = cpu.select(pl.col(col).gather(order).cast(texts.get(col, schema[col]),
                                                                strict=False)
                                 for col in step)
        cpu = cpu.drop(step)
        columns |= {col: categories_as_text(sorted_step.get_column(col)) if col in texts
                    else sorted_step.get_column(col) for col in step}
        del sorted_step
    return pl.DataFrame([columns[col] if col in columns
                         else pl.repeat(None, order.len(), dtype=dtype, eager=True).alias(col)
                         for col, dtype in schema.items()])


def _parent_ops(rows: pl.LazyFrame) -> pl.LazyFrame:
    """``parent_op`` of each row: for runtime and driver calls, the operator that issued them.

    The operator shares the call's Kineto "External id". Only the ids that some launch carries
    are grouped: grouping every operator was the largest allocation of the whole ingest
    (bench/NOTES.md, round 3).
    """
    calls = pl.col("kind").is_in(API_KINDS)
    launch_ids = rows.filter(calls).select("external_id").drop_nulls().unique()
    ops = (
        rows.filter(pl.col("kind") == "op")
        .join(launch_ids, on="external_id", how="semi")
        .group_by("external_id")
        .agg(parent_op=pl.col("name").sort_by("start_ns", maintain_order=True).last())
    )
    return (
        rows.select("external_id", call=calls)
        .join(ops, on="external_id", how="left", maintain_order="left")
        .select(parent_op=pl.when("call").then("parent_op"))
    )


def _name_columns(pairs: pl.LazyFrame) -> pl.LazyFrame:
    """Category and copy direction of each distinct (kind, name): regexes run once per name."""
    name, kind = pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String)
    copy = name.str.extract_groups(r"Memcpy ((?-u:\w)+) \(((?-u:\w)+) -> ((?-u:\w)+)\)")
    out = pairs.with_columns(
        category=activity_category(kind, name),
        copy_kind=copy.struct.field("1"),
        src_kind=copy.struct.field("2").str.to_lowercase(),
        dst_kind=copy.struct.field("3").str.to_lowercase(),
    )
    # AMD traces name copies differently ("CopyHostToDevice"): fill what the name did not give.
    return out.with_columns(
        copy_kind=pl.when(kind == "memcpy").then(
            pl.coalesce(
                pl.col("copy_kind"),
                name.str.to_lowercase().str.extract(r"(hosttodevice|devicetohost|devicetodevice)")
                .replace({"hosttodevice": "HtoD", "devicetohost": "DtoH", "devicetodevice": "DtoD"}),
            )
        ),
    )


def _launches(cpu_rows: pl.LazyFrame) -> pl.LazyFrame:
    """Whether each correlation id's launch call launched a CUDA graph: the first call in time
    (in file order among equal times) decides, as in the sorted CPU frame."""
    return (
        cpu_rows.filter(pl.col("kind").is_in(API_KINDS))
        .select("correlation", "start_ns", launch_name=pl.col("name").cast(pl.String))
        .sort("start_ns", maintain_order=True)
        .unique("correlation", keep="first")
        .select("correlation",
                graph_launched=pl.col("launch_name").str.contains("(?i)graphlaunch"))
    )


def _gpu_plan(rows: pl.DataFrame, launches: pl.LazyFrame) -> pl.LazyFrame:
    lazy = rows.lazy()
    names = _name_columns(lazy.select("kind", "name").unique())
    gpu = (
        lazy.join(names, on=["kind", "name"], how="left", nulls_equal=True, maintain_order="left")
        .join(launches, on="correlation", how="left", maintain_order="left")
    )
    # Sorted while names are still categories (cheap to move and compare); cast to the
    # canonical types once, after deduplication.
    return (conform_lazy(gpu, "gpu", dtypes={"name": pl.Categorical})
            .sort("start_ns", maintain_order=True))


def _deduplicated_gpu(gpu: pl.DataFrame, rows_in: int, meta: TraceMeta) -> pl.DataFrame:
    # Activities launched before profiling began have no launch call (and so no graph_launched);
    # count them, don't warn.
    meta.extra["gpu_without_launch"] = gpu.select(
        (pl.col("graph_launched").is_null() & (pl.col("kind") == "kernel")).sum()
    ).item()
    # Exact duplicate rows share these five numbers: hashing them finds out whether there are
    # any for a fifth of the cost of comparing whole rows, which then only runs when needed.
    if gpu.select("start_ns", "end_ns", "device", "stream", "correlation").is_duplicated().any():
        gpu = gpu.unique(maintain_order=True)
    if gpu.height < rows_in:
        meta.warnings.append(f"dropped {rows_in - gpu.height} duplicate GPU events")
    return gpu.with_columns(categories_as_text(gpu["name"]))


def _categories_kept(schema: Mapping[str, pl.DataType]) -> dict[str, pl.DataType]:
    """The columns of ``schema`` held as categories that the CPU frame wants as text: they stay
    categories through the sort, and :func:`categories_as_text` makes them text."""
    wanted = FRAME_SCHEMAS["cpu"]
    return {col: pl.Categorical() for col, dtype in schema.items()
            if dtype == pl.Categorical and wanted.get(col) == pl.String}


def _counter_frame(mem: pl.DataFrame) -> pl.DataFrame:
    if mem.is_empty():
        return empty_frame("counters")
    long = pl.concat(
        [
            mem.select("rank", pid="pid_int", device="Device Id", ts_ns="start_ns",
                       value=pl.col(src).cast(pl.Float64), name=pl.lit(name))
            for src, name in (("Total Allocated", "allocated_bytes"), ("Total Reserved", "reserved_bytes"))
        ]
    )
    return conform(long.sort("ts_ns"), "counters")


def _memory_frame(mem: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """The caching allocator's events (``[memory]`` instants), each with the operator around it."""
    if mem.is_empty():
        return empty_frame("memory")
    rows = mem.select(
        # Host allocations (profile_memory=True records them too) carry Device Id -1.
        "rank", pid="pid_int", tid="tid_int", device=pl.when(pl.col("Device Id") >= 0)
        .then("Device Id"), ts_ns="start_ns",
        source=pl.lit("allocator"), bytes="Bytes", address="Addr",
        allocated_bytes="Total Allocated", reserved_bytes="Total Reserved",
    ).sort("ts_ns", maintain_order=True)
    rows = rows.with_columns(operator=innermost_operator(rows, cpu))
    return conform(rows, "memory")


# --- the compiled twin ---------------------------------------------------------------------

#: The frames the compiled pass assembles, in the order of its tables.
FRAMES = ("cpu", "gpu", "annotations", "syncs")


class AssembleArgs(NamedTuple):
    """The arguments of ``_eventassemble.assemble``, in its order."""

    cpu: ReducedTable
    gpu: ReducedTable
    annotations: ReducedTable
    syncs: ReducedTable
    rank: int
    #: ``categories.KERNEL_PATTERNS``: (category, regex) pairs, matched in C by _regexlite.h.
    kernel_patterns: tuple[tuple[str, str], ...]
    #: The Enum values a copy direction and a memory kind may take (``model``).
    copy_kinds: tuple[str, ...]
    memory_kinds: tuple[str, ...]


class Assembled(NamedTuple):
    """What the compiled pass gives: GPU kernels without a launch call, and the frames."""

    without_launch: int
    frames: dict[str, pl.DataFrame]


#: Canonical columns the compiled assembly does not build: set after the readers.
LATER_COLUMNS = frozenset({"mangled_name"})


def layout(name: str) -> str:
    """The letters of a canonical frame's columns, as the compiled pass writes them (an Enum is
    text until cast; :data:`LATER_COLUMNS` are not written)."""
    return "".join(LayoutLetter.TEXT.value if isinstance(dtype, pl.Enum)
                   else LETTER_OF[dtype] for col, dtype in FRAME_SCHEMAS[name].items()
                   if col not in LATER_COLUMNS)


def compiled_frames(tables: list[ReducedTable], rank: int) -> Assembled | None:
    """The compiled assembly of the reduced tables of one group (cpu, gpu, annotations, syncs
    first, as :class:`~.reduce.Reduced` holds them), or None."""
    if not AVAILABLE or not -(2**31) <= rank < 2**31:
        return None
    cpu, gpu, annotations, syncs = tables[:len(FRAMES)]
    args = AssembleArgs(cpu, gpu, annotations, syncs, rank, KERNEL_PATTERNS, COPY_KINDS,
                        MEMORY_KINDS)
    out = _eventassemble.assemble(*args)
    if out is None:
        return None
    without_launch, assembled = out
    frames = {}
    for name, (rows, letters, columns) in zip(FRAMES, assembled, strict=True):
        schema = FRAME_SCHEMAS[name]
        # Columns set after the readers (demangled names, traceanalyzer.demangle) come last.
        built = [c for c in schema if c not in LATER_COLUMNS]
        frame = batches_frame(letters, tuple(built), [(rows, columns)])
        for i, col in enumerate(built):
            dtype = schema[col]
            if isinstance(dtype, pl.Enum):  # text that holds only the Enum's values, or null
                frame.replace_column(i, frame.get_column(col).cast(dtype))
        if len(built) < len(schema):
            frame = frame.with_columns(pl.lit(None, schema[c]).alias(c)
                                       for c in schema if c in LATER_COLUMNS)
        frames[name] = frame
    return Assembled(without_launch, frames)
