"""Reduce a decoded chunk to the canonical frames' rows and columns, as soon as it is decoded.

Reducing each chunk right away keeps the peak of memory near the final frames plus one chunk:
long names, ``args`` fields and event kinds nothing uses never pile up. Two twins do it:

- :func:`reduce_frame`, in Polars, is the reference, and reduces every chunk the compiled pass
  declines or that the C decoder did not read;
- :func:`reduce_raw`, the compiled pass (``_native/_eventreduce.c``) when it is built, gives the
  reference's frames for a chunk the C decoder read, or None. It runs on the decoding thread and
  copies only the rows and columns the frames take (little text: most text columns share the
  decoder's buffers). Its columns reach Polars through the Arrow C stream interface that the
  extension implements (``_arrowstream.h``), a stream per column with an array per chunk, without
  pyarrow in between (:func:`batches_frame`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import polars as pl
import polars.selectors as cs

from traceanalyzer.ingest.bounds import TIME_LIMIT_NS, TIME_LIMIT_US
from traceanalyzer.ingest.column_codes import LETTER_OF
from traceanalyzer.ingest.kineto.decode import Raw
from traceanalyzer.ingest.kineto.schema import (
    ASSEMBLED_GPU_COLUMNS,
    CPU_CATEGORIES,
    GPU_CATEGORIES,
    KEPT_PHASES,
    STEP_PATTERN,
)
from traceanalyzer.model import COLLECT_ENGINE, FRAME_SCHEMAS, conform_lazy

try:
    from traceanalyzer.ingest.kineto._native import _eventreduce
except ImportError:  # pragma: no cover - depends on how the package was installed
    _eventreduce = None  # type: ignore[assignment]

AVAILABLE = _eventreduce is not None


class Batch(NamedTuple):
    """One chunk's columns of a reduced table (a column may be None: all null)."""

    rows: int
    columns: tuple[Any, ...]


class ReducedTable(NamedTuple):
    """A table of the compiled reduction: its layout (a letter per column, as
    :class:`~traceanalyzer.ingest.column_codes.LayoutLetter` names them) and a batch of columns
    per chunk."""

    layout: str
    batches: list[Batch]


# --- the reference, in Polars --------------------------------------------------------------


def kept(events: pl.DataFrame) -> pl.DataFrame:
    """The events of KEPT_PHASES, as the C decoder keeps them (the scan drops most others)."""
    return events.filter(pl.col("ph").is_in(KEPT_PHASES))


def _ns(col: str) -> pl.Expr:
    """µs floats to int64 ns, rounding the fraction on its own to keep ns exact; null beyond
    ``bounds.TIME_LIMIT_US`` (where the product would wrap or come near int64's end)."""
    us = pl.col(col)
    whole = us.floor()
    return pl.when(whole.abs() <= TIME_LIMIT_US).then(
        whole.cast(pl.Int64, strict=False) * 1000 + ((us - whole) * 1000).round().cast(pl.Int64))


def _dur_ns(col: str) -> pl.Expr:
    """µs floats to int64 ns: 0 when missing; -1 (counted with the negative ones, treated as
    zero-length) when not a usable number (NaN, infinite, ``1e308``: beyond the time limit)."""
    ns = (pl.col(col) * 1000).round()
    return (pl.when(ns.is_null()).then(0)
            .when(ns.abs() < float(TIME_LIMIT_NS)).then(ns.cast(pl.Int64, strict=False))
            .otherwise(-1))


class Parts:
    """One chunk's events, already reduced to the rows and columns the canonical frames take.

    Reducing each chunk as soon as it is decoded keeps the peak of memory near the final frames
    plus one chunk: long names, ``args`` fields and event kinds nothing uses never pile up. Only
    the steps that need every event (the parent-op and launch joins, dedup, sorting) wait for
    :func:`assemble`.
    """

    __slots__ = ("untimed", "negative", "cpu", "gpu", "annotations", "syncs", "memory")
    TABLES = __slots__[2:]

    def __init__(self, untimed: int, negative: int, frames: list[pl.DataFrame]) -> None:
        self.untimed, self.negative = untimed, negative
        self.cpu, self.gpu, self.annotations, self.syncs, self.memory = frames


def reduce_frame(events: pl.DataFrame, compact: bool = False) -> Parts:
    """The reference reduction, in Polars: a chunk's decoded events (``EVENT_SCHEMA``, of
    ``KEPT_PHASES``) to the rows of the canonical frames; ``compact`` keeps text as categories."""
    # Only KEPT_PHASES arrive: filtering here again copied every column of every event.
    ev = (
        events.lazy()
        .with_columns(
            cat=pl.col("cat").str.to_lowercase(),
            start_ns=_ns("ts"),
            dur_ns=_dur_ns("dur"),
            pid_int=pl.col("pid").cast(pl.Int64, strict=False),
            tid_int=pl.col("tid").cast(pl.Int64, strict=False),
        )
        .unnest("args")
        .with_columns(end_ns=pl.col("start_ns") + pl.col("dur_ns").clip(lower_bound=0))
        # An event ending beyond the time limit is as unplaceable as one starting there.
        .with_columns(start_ns=pl.when(pl.col("end_ns") < TIME_LIMIT_NS).then("start_ns"))
        .collect(engine=COLLECT_ENGINE)
    )
    # Events whose timestamp is missing, not a number or beyond the time limit (±2^62 ns)
    # cannot be placed in time: they are skipped (and counted, for the user).
    counts = ev.lazy().select(untimed=pl.col("start_ns").is_null().sum(),
                              negative=(pl.col("start_ns").is_not_null() & (pl.col("dur_ns") < 0)).sum())
    lazy = ev.lazy().filter(pl.col("start_ns").is_not_null())
    cpu, gpu = _cpu_rows(lazy), _gpu_rows(lazy)
    if compact:
        cpu, gpu = _as_categories(cpu), _as_categories(gpu)
    # Without common-subplan elimination: caching the shared filter for the six queries costs
    # more than filtering six times (bench/NOTES.md, round 6).
    *frames, counted = pl.collect_all([cpu, gpu, _annotation_rows(lazy), _sync_rows(lazy),
                                       _memory_rows(lazy), counts], engine=COLLECT_ENGINE,
                                      optimizations=pl.QueryOptFlags(comm_subplan_elim=False))
    return Parts(counted["untimed"].item(), counted["negative"].item(), frames)


def _as_categories(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Text columns as categories until the frames are assembled.

    Names, shapes and kinds repeat thousands of times. As categories a chunk's rows hold four
    bytes per value and no longer keep the decoded chunk's string buffers alive, which cut the
    peak memory of a big ingest (bench/NOTES.md, round 3); ``conform`` turns them back into
    text at the end.
    """
    return rows.with_columns(cs.string().cast(pl.Categorical))


def _cpu_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    return ev.filter(
        (pl.col("ph") == "X")
        & pl.col("cat").is_in(list(CPU_CATEGORIES))
        & ~pl.col("name").str.contains(STEP_PATTERN)
    ).select(
        "name", "start_ns", "end_ns", "correlation",
        kind=_lookup("cat", CPU_CATEGORIES, default="other"),
        pid=pl.col("pid_int"),
        tid=pl.col("tid_int"),
        external_id=pl.col("External id"),
        input_dims=pl.col("Input Dims"),
        input_types=pl.col("Input type"),
        call_stack=pl.when(pl.col("Call stack") != "").then(pl.col("Call stack")),
        concrete_inputs=pl.col("Concrete Inputs"),
        flops=pl.col("flops"),
    )


def _lookup(column: str, mapping: dict[str, str], default: str | None = None) -> pl.Expr:
    """``replace_strict`` for a handful of keys, as a when/then chain: per chunk, the join that
    ``replace_strict`` builds costs more than the whole column's work (bench/NOTES.md, round 4)."""
    expr = pl.lit(default, pl.String)
    for key, value in reversed(mapping.items()):
        expr = pl.when(pl.col(column) == key).then(pl.lit(value)).otherwise(expr)
    return expr


def _gpu_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    """GPU activities with every row-wise column; the launch join waits for all CPU rows."""
    gpu = ev.filter((pl.col("ph") == "X") & pl.col("cat").is_in(list(GPU_CATEGORIES)))
    gpu = gpu.with_columns(
        kind=_lookup("cat", GPU_CATEGORIES),
        device=pl.coalesce("device", "pid_int"),
        stream=pl.coalesce("stream", "tid_int"),
        external_id=pl.col("External id"),
        **_dims("grid"),
        **_dims("block"),
        registers=pl.col("registers per thread"),
        shared_mem=pl.col("shared memory"),
    )
    return conform_lazy(gpu, "gpu", exclude=ASSEMBLED_GPU_COLUMNS)


def _dims(field: str) -> dict[str, pl.Expr]:
    """``grid_x/y/z`` from the decoder's text of ``[64, 1, 1]``; null where a number is missing."""
    groups = pl.col(field).str.extract_groups(
        r"^\[(?-u:\s)*(-?[0-9]+)(?:(?-u:\s)*,(?-u:\s)*(-?[0-9]+))?(?:(?-u:\s)*,(?-u:\s)*(-?[0-9]+))?")
    return {f"{field}_{axis}": groups.struct.field(str(i + 1)).cast(pl.Int64, strict=False)
            for i, axis in enumerate("xyz")}


def _annotation_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    step = pl.col("name").str.extract(STEP_PATTERN).cast(pl.Int64, strict=False)
    # The literal prefix first: the regex then runs on a handful of rows, not on every event.
    candidates = pl.col("name").str.starts_with("ProfilerStep#") | pl.col("cat").is_in(
        ["user_annotation", "gpu_user_annotation"])
    ann = ev.filter((pl.col("ph") == "X") & candidates).with_columns(step=step).filter(
        pl.col("step").is_not_null() | pl.col("cat").is_in(["user_annotation", "gpu_user_annotation"])
    ).with_columns(
        kind=pl.when(pl.col("step").is_not_null() & (pl.col("cat") != "gpu_user_annotation"))
        .then(pl.lit("step"))
        .when(pl.col("cat") == "gpu_user_annotation")
        .then(pl.lit("gpu_user"))
        .otherwise(pl.lit("user")),
        pid=pl.col("pid_int"),
        tid=pl.col("tid_int"),
    )
    return conform_lazy(ann, "annotations")


def _sync_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    syncs = ev.filter((pl.col("ph") == "X") & (pl.col("cat") == "cuda_sync")).with_columns(
        pid=pl.col("pid_int"),
        tid=pl.col("tid_int"),
        device=pl.coalesce("device", "pid_int"),
        # "Stream Sync", "Event Sync", "Context Sync", "Stream Wait Event": the types nsys names.
        sync_type=pl.when(pl.col("name").str.contains("(?i)wait"))
        .then(pl.lit("stream_wait"))
        .otherwise(pl.col("name").str.to_lowercase().str.extract(r"^((?-u:\w)+)")),
    )
    return conform_lazy(syncs, "syncs")


def _memory_rows(ev: pl.LazyFrame) -> pl.LazyFrame:
    return ev.filter(pl.col("name") == "[memory]").select(
        "pid_int", "tid_int", "Device Id", "start_ns", "Total Allocated", "Total Reserved",
        "Bytes", "Addr",
    )


class Reduced(NamedTuple):
    """A chunk the compiled reduction took: its columns, made frames per group, not per chunk
    (a frame's fixed cost is most of a small chunk's)."""

    untimed: int
    negative: int
    tables: list[ReducedTable]

    @staticmethod
    def join(chunks: list[Reduced]) -> Reduced:
        """The chunks as one: their tables with a batch per chunk, in order."""
        tables = [ReducedTable(layout, [batch for c in chunks for batch in c.tables[i].batches])
                  for i, (layout, _) in enumerate(chunks[0].tables)]
        return Reduced(sum(c.untimed for c in chunks), sum(c.negative for c in chunks), tables)


# The columns of the compiled reduction's tables (``_native/_eventreduce.c``'s LAYOUT), named as
# :func:`reduce_frame`'s frames name them; the columns it leaves null are added by name.
COMPILED_COLUMNS = (
    ("name", "start_ns", "end_ns", "correlation", "kind", "pid", "tid", "external_id",
     "input_dims", "input_types", "call_stack", "concrete_inputs", "flops"),
    ("device", "stream", "kind", "name", "start_ns", "end_ns", "correlation", "external_id",
     "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_mem",
     "bytes"),
    ("pid", "tid", "kind", "name", "start_ns", "end_ns", "step"),
    ("pid", "tid", "device", "stream", "sync_type", "start_ns", "end_ns", "correlation"),
    ("pid_int", "tid_int", "Device Id", "start_ns", "Total Allocated", "Total Reserved", "Bytes",
     "Addr"),
)




def compiled_parts(untimed: int, negative: int, tables: list[ReducedTable]) -> Parts:
    """:func:`reduce_frame`'s frames from the compiled reduction's columns (the same frames: tested).

    No frame queries (their fixed cost was most of a chunk's): a frame per table, a chunk per
    batch, straight from the reduction's buffers.
    """
    frames = []
    for name, names, (layout, batches) in zip(Parts.TABLES, COMPILED_COLUMNS, tables,
                                              strict=True):
        schema = None
        if name in ("gpu", "annotations", "syncs"):  # the canonical frames' column order and types
            schema = {col: dtype for col, dtype in FRAME_SCHEMAS[name].items()
                      if col not in ASSEMBLED_GPU_COLUMNS}
            at = {col: i for i, col in enumerate(names)}
            layout = "".join(layout[at[col]] if col in at else LETTER_OF[dtype]
                             for col, dtype in schema.items())
            batches = [Batch(rows, tuple(cols[at[col]] if col in at else None for col in schema))
                       for rows, cols in batches]
            names = tuple(schema)
        frame = batches_frame(layout, names, batches)
        given = frame.schema
        for i, (col, dtype) in enumerate((schema or {}).items()):
            if given[col] != dtype:  # the kinds, text until cast to their Enum
                frame.replace_column(i, frame.get_column(col).cast(dtype))
        frames.append(frame)
    return Parts(untimed, negative, frames)


# --- the compiled twin ---------------------------------------------------------------------


def reduce_raw(raw: Raw) -> Reduced | None:
    """The compiled reduction of a chunk of ``EVENT_SCHEMA`` events, or None (the caller then
    uses :func:`reduce_frame`).

    Its tables are the cpu, gpu, annotation, sync and memory rows, each one batch of columns in
    the column order of ``_eventreduce.c``'s LAYOUT (:data:`COMPILED_COLUMNS` names them).
    """
    if _eventreduce is None:
        return None
    out = _eventreduce.reduce(*raw)
    if out is None:
        return None
    untimed, negative, tables = out
    return Reduced(untimed, negative,
                   [ReducedTable(layout, [Batch(rows, cols)]) for rows, layout, cols in tables])


def batches_frame(layout: str, names: Sequence[str], batches: Sequence[tuple[int, tuple[Any, ...]]]
                  ) -> pl.DataFrame:
    """One frame of the batches, a chunk per batch, their buffers shared, not copied.

    A column of a batch may be None: all null (a column the reduction does not fill).
    """
    assert _eventreduce is not None
    table = _eventreduce.Batches(layout.encode(), tuple(names), list(batches))
    # A stream per column: each column's buffers are freed as soon as that column is dropped.
    return pl.DataFrame([pl.Series(values=table.column(i)) for i in range(len(names))])
