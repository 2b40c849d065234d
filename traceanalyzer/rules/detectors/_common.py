"""Small Polars helpers shared by the detectors: step assignment, enclosing operators, source
lines, the rank's kernels, operators' recorded inputs and collectives' names.

Idle gaps, their causes, steps and launches come from :class:`traceanalyzer.analysis.views.Views`
and the interval algebra from :mod:`traceanalyzer.analysis.intervals`; nothing here redoes them.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceanalyzer.texts import categories_as_text

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views
    from traceanalyzer.model import Device

#: Frames of the Python stack that are library code, not the user's: skipped when naming the
#: source line of an event.
_LIBRARY_FRAME = r"(?i)site-packages|dist-packages|/torch/|^torch/|<built-in|<frozen|threading\.py|runpy\.py|/lib/python3"

NS_PER_US = 1_000
NS_PER_MS = 1_000_000


def assign_step(frame: pl.DataFrame, steps: pl.DataFrame, *, at: str = "start_ns") -> pl.DataFrame:
    """Add ``step``: the step whose [start_ns, end_ns) holds ``frame[at]`` (null outside steps)."""
    if "step" in frame.columns:
        frame = frame.drop("step")
    if steps.height == 0 or frame.height == 0:
        return frame.with_columns(pl.lit(None, dtype=pl.Int64).alias("step"))
    marks = steps.select(
        pl.col("start_ns").alias("_step_start"), pl.col("end_ns").alias("_step_end"), "step"
    ).sort("_step_start")
    # The as-of join on the time and row number alone; the step goes back as a column (sorting
    # ``frame`` itself would move every column twice).
    keys = frame.select(at).with_row_index("_row")
    if not keys[at].is_sorted():
        keys = keys.sort(at)
    found = keys.join_asof(marks, left_on=at, right_on="_step_start", strategy="backward").select(
        "_row", pl.when(pl.col(at) < pl.col("_step_end")).then(pl.col("step")).alias("step"))
    if not found["_row"].is_sorted():
        found = found.sort("_row")
    return frame.with_columns(found["step"])


def in_steps(frame: pl.DataFrame, steps: pl.DataFrame, *, at: str = "start_ns") -> pl.DataFrame:
    """Rows inside a step, or every row when the trace marks no steps."""
    if steps.height == 0:
        return assign_step(frame, steps, at=at)
    return assign_step(frame, steps, at=at).filter(pl.col("step").is_not_null())


def source_line(call_stack: pl.Expr) -> pl.Expr:
    """The innermost frame of a ';'-separated Python stack that is user code, not a library."""
    frames = call_stack.str.split(";").list.eval(
        pl.element().str.strip_chars().filter(
            (pl.element().str.len_chars() > 0) & ~pl.element().str.contains(_LIBRARY_FRAME)
        )
    )
    return frames.list.first()


def enclosing_op(calls: pl.DataFrame, cpu: pl.DataFrame, *, name: str = "op") -> pl.DataFrame:
    """Add ``name``: the outermost framework operator on the same thread that encloses each call
    (e.g. ``aten::item`` around a ``cudaStreamSynchronize``), else the ingestor's ``parent_op``.

    Operators nest, so the outermost ones of a thread do not overlap: an as-of join on their
    starts finds the candidate, O(n log n) however many calls there are.
    """
    thread = ["rank", "pid", "tid"]
    ops = (  # lazy: only the columns it needs are filtered (the CPU frame's stacks are not)
        cpu.lazy().filter(pl.col("kind") == "op")
        .select(*thread, pl.col("name").alias("_op"), pl.col("start_ns").alias("_os"),
                pl.col("end_ns").alias("_oe"))
    )
    # The CPU frame comes sorted by start (checked: one pass): then each thread's rows are in
    # start order too, and neither the sort by thread nor the sort back is needed (two sorts of
    # a million operators, 0.8 s at 1 GB).
    in_order = bool(cpu.height) and cpu["start_ns"].is_sorted()
    if not in_order:
        ops = ops.sort(*thread, "_os")
    reach = pl.col("_oe").cum_max().shift(1).over(thread).fill_null(pl.col("_os"))
    ops = ops.filter(pl.col("_os") >= reach)
    top = (ops if in_order else ops.sort("_os")).collect()
    fallback = pl.col("parent_op") if "parent_op" in calls.columns else pl.lit(None, pl.String)
    if top.height == 0 or calls.height == 0:
        return calls.with_columns(fallback.alias(name), pl.lit(None, pl.Int64).alias(f"{name}_start_ns"),
                                  pl.lit(None, pl.Int64).alias(f"{name}_end_ns"))
    inside = pl.col("_oe") >= pl.col("end_ns")
    out = (
        calls.with_row_index("_row")
        .sort("start_ns")
        .join_asof(top, left_on="start_ns", right_on="_os", by=thread, strategy="backward",
                   check_sortedness=False)
        .with_columns(
            pl.coalesce(pl.when(inside).then(pl.col("_op")), fallback).alias(name),
            pl.when(inside).then(pl.col("_os")).alias(f"{name}_start_ns"),
            pl.when(inside).then(pl.col("_oe")).alias(f"{name}_end_ns"),
        )
        .sort("_row")
        .drop("_row", "_op", "_os", "_oe")
    )
    return out


def window_length(views: Views) -> int:
    """The analyzed window's length in ns (0 when the trace has none)."""
    window = getattr(views, "window", None)
    if not window or window[0] is None or window[1] is None:
        return 0
    return max(0, int(window[1]) - int(window[0]))


def step_count(views: Views) -> int:
    """The number of steps the analyzed rank marks (a trace may hold several ranks' steps)."""
    steps = getattr(views, "steps", None)
    return 0 if steps is None else int(own_rank(views, steps).height)


def own_rank(views: Views, frame: pl.DataFrame) -> pl.DataFrame:
    """Rows of the rank the analyzed window belongs to (a trace may hold several ranks)."""
    if frame.height == 0 or "rank" not in frame.columns:
        return frame
    rank = views.metrics.rank
    ranks = frame["rank"]
    if ranks.null_count() == 0 and ranks.min() == rank and ranks.max() == rank:
        return frame  # one rank (most traces): no copy of every column
    return frame.filter(pl.col("rank") == rank)


def analyzed_device(views: Views) -> Device | None:
    """The GPU the analyzed rank ran on: the recorded device with the most GPU time, else the
    first device the trace describes (by name or capability); None when it describes none."""
    meta = getattr(views, "meta", None)
    devices = list(getattr(meta, "devices", None) or [])
    if not devices:
        return None
    gpu = own_rank(views, views.gpu)
    if gpu.height and "device" in gpu.columns:
        busy = (gpu.filter(pl.col("device").is_not_null())
                .group_by("device").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))
                .sort(["t", "device"], descending=[True, False]))
        for device_id in busy["device"].to_list():
            dev = meta.device(device_id) if meta is not None else None
            if dev is not None:
                return dev
    described = [d for d in devices if d.name or d.compute_capability]
    return (described or devices)[0]


def attach_source(calls: pl.DataFrame, cpu: pl.DataFrame, *, tid: str = "tid",
                  start: str = "start_ns", end: str = "end_ns") -> pl.DataFrame:
    """Add ``source``: the innermost user-code Python frame (``with_stack=True``) on the same thread
    that encloses each call, e.g. ``train.py(42): step``; null when stacks were not recorded.

    Meant for the few calls a rule reports (syncs, copies), not for every event.
    """
    # Python frames first, then the pattern on their names only (not on every CPU event's).
    frames = cpu.select("kind", "rank", "tid", "name", "start_ns", "end_ns").filter(
        pl.col("kind") == "python")
    frames = frames.filter(~pl.col("name").str.contains(_LIBRARY_FRAME))
    indexed = calls.with_row_index("_row")
    if frames.height == 0 or indexed.height == 0:
        return calls.with_columns(pl.lit(None, dtype=pl.String).alias("source"))
    # A range join on the two times (an IEJoin), then the thread: its output is each call's
    # enclosing frames on any thread, a few stacks deep. Joining on the thread first would pair
    # every call with every frame of its thread before filtering.
    pairs = (
        indexed.select("_row", "rank", pl.col(tid).alias("_tid"), pl.col(start).alias("_s"),
                       pl.col(end).alias("_e"))
        .join_where(frames.select(pl.col("rank").alias("_prank"), pl.col("tid").alias("_ptid"),
                                  pl.col("name").alias("_src"), pl.col("start_ns").alias("_ps"),
                                  pl.col("end_ns").alias("_pe")),
                    pl.col("_ps") <= pl.col("_s"), pl.col("_pe") >= pl.col("_e"))
        .filter(pl.col("_prank") == pl.col("rank"), pl.col("_ptid") == pl.col("_tid"))
        .sort(["_ps", "_pe"], descending=[True, False])
        .group_by("_row")
        .agg(pl.col("_src").first().alias("source"))
    )
    return indexed.join(pairs, on="_row", how="left").sort("_row").drop("_row")


#: What a message names as the operator behind some work that ran inside none, on a trace that
#: records operators (torch.profiler: some work runs outside every operator).
UNRECORDED_OP = "an unrecorded operator"


def records_operators(views: Views) -> bool:
    """Whether the trace records framework operators (torch.profiler does; Nsight Systems and
    most Perfetto traces record none, so no sentence may speak of "the operator" there)."""
    cpu = views.cpu
    return cpu.height > 0 and "kind" in cpu.columns and bool((cpu["kind"] == "op").any())


def origin(views: Views, calls: pl.Series | None) -> str:
    """What a message names as the origin of work that ran inside no recorded operator: on a
    trace that records operators, :data:`UNRECORDED_OP`; on one that records none, what it does
    record, the runtime or driver call that launched most of the work ("cudaMemcpyAsync
    calls"; ``calls``: the launching calls' names), else "launches the trace does not name"."""
    if records_operators(views):
        return UNRECORDED_OP
    names = calls.drop_nulls() if calls is not None else None
    if names is None or names.len() == 0:
        return "launches the trace does not name"
    counts = names.to_frame("name").group_by("name").len().sort(["len", "name"],
                                                                 descending=[True, False])
    return f"{counts['name'][0]} calls"


def ms(ns: float | int | None) -> float:
    return 0.0 if ns is None else float(ns) / NS_PER_MS


def pct(part: float | int, whole: float | int) -> float:
    return 100.0 * float(part) / float(whole) if whole else 0.0


_KERNELS: weakref.WeakKeyDictionary[Views, pl.DataFrame] = weakref.WeakKeyDictionary()


def kernels_of(views: Views) -> pl.DataFrame:
    """The rank's kernels with their launches (``views.launches``) and a ``dur`` column.
    Computed once per views: a dozen rules read it, and each filter of the launches copies
    every column of the rank's GPU activity."""
    cached = _KERNELS.get(views)
    if cached is None:
        cached = own_rank(views, views.launches).filter(pl.col("kind") == "kernel").with_columns(
            dur=pl.col("end_ns") - pl.col("start_ns")
        )
        _KERNELS[views] = cached
    return cached


def first_input_dims(dims: pl.Expr) -> pl.Expr:
    """Shape of an operator's first input from Kineto's ``Input Dims`` JSON text, as a list of ints.

    Inputs can be nested (tensor lists), so the text is not decoded as a whole: the first
    innermost ``[...]`` is the first tensor's shape.
    """
    return dims.str.extract(r"(\[[0-9,\s-]*\])", 1).str.json_decode(pl.List(pl.Int64))


_DTYPE_BYTES = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2, "double": 8,
                "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "int": 4, "long int": 8, "bool": 1}


def element_bytes(input_types: pl.Expr) -> pl.Expr:
    """Bytes per element of an operator's first input, from Kineto's ``Input type`` JSON text."""
    return input_types.str.extract(r'^\[\s*"([^"]*)"', 1).replace_strict(
        _DTYPE_BYTES, default=None, return_dtype=pl.Int64)


#: Per views, the operators' ids sorted and their rows (None when they span several ranks).
_INPUT_INDEX: weakref.WeakKeyDictionary[Views, tuple[np.ndarray, np.ndarray, int] | None] = (
    weakref.WeakKeyDictionary())


def with_inputs(views: Views, frame: pl.DataFrame, columns: dict[str, str],
                on: str = "external_id") -> pl.DataFrame:
    """``frame`` with the :func:`op_inputs` ``columns`` (new name: op_inputs column) of the
    operator whose (rank, external_id) is the row's (rank, ``on``); null where there is none;
    in ``frame``'s order. On one rank, a binary search in the operators' sorted ids (sorted once
    per views) instead of a hash join: a hash table of a million operators for each of the four
    rules that look shapes up cost 0.3-0.6 s each at 1 GB. The shapes' columns are gathered
    for the rows found only, through each operator's shape code."""
    ops, shapes = _operator_shapes(views)
    if views not in _INPUT_INDEX:
        index = None
        if ops.height and ops["rank"].null_count() == 0 and ops["rank"].n_unique() == 1:
            ids = ops["external_id"].to_numpy()
            order = np.argsort(ids, kind="stable")
            index = (ids[order], order, int(ops["rank"][0]))
        _INPUT_INDEX[views] = index
    index = _INPUT_INDEX[views]
    ranks = frame["rank"]
    if index is None or frame.height == 0 or ranks.null_count() or ranks.min() != index[2] \
            or ranks.max() != index[2]:
        rows = frame.select("rank", pl.col(on).alias("external_id")).join(
            ops.select("rank", "external_id").with_row_index("_op"),
            on=["rank", "external_id"], how="left", maintain_order="left")["_op"]
    else:
        ids, order, _ = index
        wanted = frame[on]
        values = wanted.fill_null(ids[0]).to_numpy()
        at = np.minimum(np.searchsorted(ids, values), len(ids) - 1)
        found = (ids[at] == values) & wanted.is_not_null().to_numpy()
        rows = pl.select(pl.when(pl.Series(found)).then(pl.Series(order[at], dtype=pl.UInt32))
                         ).to_series()
    # Only the columns asked for are gathered: the shapes' texts and the operator's name are
    # 16 bytes a row each (and the name a copy of its text, cast from a category, per row).
    shape_rows = ops["_shape"].gather(rows)
    looked_up = pl.DataFrame(
        [categories_as_text(ops["input_op"].gather(rows)) if c == "input_op"
         else shapes[c].gather(shape_rows) for c in dict.fromkeys(columns.values())])
    return pl.concat([frame, looked_up.select(*(pl.col(c).alias(a) for a, c in columns.items()))],
                     how="horizontal")


#: Per views: each operator's shape code, and the table of distinct shapes it indexes.
_SHAPES: weakref.WeakKeyDictionary[Views, tuple[pl.DataFrame, pl.DataFrame]] = (
    weakref.WeakKeyDictionary())

#: The columns of op_inputs (besides rank and external_id).
INPUT_COLUMNS = ("input_op", "input_dims", "input_types", "numel", "full_inputs", "ndim",
                 "last_dim", "tensor_bytes")


def op_inputs(views: Views) -> pl.DataFrame:
    """Operators with recorded inputs, one per (rank, external_id), the innermost (last started):
    input_op, input_dims, input_types, and for the first input numel, ndim, last_dim and
    tensor_bytes (:data:`INPUT_COLUMNS`). Built on each call from the per-views cache of
    :func:`_operator_shapes`; rules that look up rows use :func:`with_inputs`."""
    ops, shapes = _operator_shapes(views)
    return ops.select("rank", "external_id", pl.col("input_op").cast(pl.String)).hstack(
        shapes.select(pl.all().gather(ops["_shape"])))


def _operator_shapes(views: Views) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per views, once: the operators (rank, external_id, input_op as a category, ``_shape``:
    a row of the shapes table) and the shapes table (input_dims, input_types and the numbers
    parsed from them). A trace holds a few hundred distinct shapes for a million operators: the
    per-operator frame holds codes, not texts or parsed numbers (20 bytes an operator)."""
    try:
        return _SHAPES[views]
    except (KeyError, TypeError):
        pass
    # Only the columns it needs, before filtering: a filter copies every column it is given, and
    # the CPU frame's stacks and names are most of its bytes.
    ops = views.cpu.select("kind", "rank", "external_id", "name", "start_ns", "input_dims",
                           "input_types").filter(pl.col("kind") == "op",
                                                 pl.col("external_id").is_not_null())
    # The CPU frame comes sorted by start: checking (one pass) is cheaper than sorting again.
    if not ops["start_ns"].is_sorted():
        ops = ops.sort("start_ns", maintain_order=True)
    # The last started per (rank, external id), in start order. Ids are most often unique
    # already: counting them (0.04 s for a million) spares the mask (0.35 s).
    one_rank = ops["rank"].n_unique() <= 1
    if not (one_rank and ops["external_id"].n_unique() == ops.height):
        last = pl.col("external_id").is_last_distinct()
        ops = ops.filter(last if one_rank else last.over("rank"))
    # The texts as categories: unique and join then hash small integers, not the texts (0.4 s
    # of 1.2 s at 1 GB).
    ops = ops.select("rank", "external_id", input_op=pl.col("name").cast(pl.Categorical),
                     _dims=pl.col("input_dims").cast(pl.Categorical),
                     _types=pl.col("input_types").cast(pl.Categorical))
    shapes = ops.select("_dims", "_types").unique(maintain_order=True).with_row_index("_shape")
    ops = ops.join(shapes, on=["_dims", "_types"], how="left", nulls_equal=True,
                   maintain_order="left").select("rank", "external_id", "input_op", "_shape")
    parsed = shapes.with_columns(
        input_dims=pl.col("_dims").cast(pl.String), input_types=pl.col("_types").cast(pl.String),
    ).with_columns(
        _first=first_input_dims(pl.col("input_dims")),
        # sizes of every tensor input (the innermost [...] lists)
        _numels=pl.col("input_dims").str.extract_all(r"\[[0-9, -]*\]").list.eval(
            pl.element().str.json_decode(pl.List(pl.Int64)).list.eval(pl.element().product())
            .list.first()
        ),
    ).with_columns(
        numel=pl.col("_first").list.eval(pl.element().product()).list.first(),
        full_inputs=pl.col("_numels").list.eval(
            (pl.element() == pl.element().first()).cast(pl.Int64)).list.sum(),
        ndim=pl.col("_first").list.len().cast(pl.Int64),
        last_dim=pl.col("_first").list.last(),
    ).with_columns(
        tensor_bytes=pl.col("numel") * element_bytes(pl.col("input_types"))
    ).select(INPUT_COLUMNS[1:])
    try:
        _SHAPES[views] = (ops, parsed)
    except TypeError:
        pass
    return ops, parsed


_COLLECTIVE = r"(?i)(allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|alltoall|all_to_all|broadcast|sendrecv|send|recv|reduce)"


def collective_name(name: pl.Expr) -> pl.Expr:
    """allreduce, allgather, sendrecv, ... from a communication kernel's name; else the kernel's
    own name up to its arguments (never a bare "other", which a message would print as "worst
    other")."""
    short = name.str.extract(r"^(?:void )?([^(<]{1,60})", 1).str.strip_chars()
    return (name.str.extract(_COLLECTIVE, 1).str.to_lowercase().str.replace_all("_", "")
            .fill_null(short).fill_null("unnamed kernel"))
