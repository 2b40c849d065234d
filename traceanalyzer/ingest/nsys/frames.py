"""Nsight Systems exports: the canonical frames built from the tables read.

Names stay ids into ``StringIds`` while rows are filtered and joined; the text is joined in at
the end, and kernel categories are computed once per distinct name, not once per row.

``globalPid``/``globalTid`` pack the pid as ``(g >> 24) & 0xFFFFFF`` and the tid as
``g & 0xFFFFFF``. Correlation ids are only unique within a process, so kernels join their
launching call on (correlation, rank) -- the same as Nsight's (correlationId, pid).
"""

from __future__ import annotations

from typing import TypeVar

import polars as pl

from traceanalyzer.categories import kernel_category
from traceanalyzer.ingest.memory import ALLOCATION_APIS, DRIVER_RESERVED
from traceanalyzer.ingest.nsys.tables import sorted_by
from traceanalyzer.model import (
    ANNOTATION_KINDS,
    CPU_KINDS,
    GPU_ACTIVITY_SCHEMA,
    GPU_KINDS,
    TraceMeta,
    conform,
    empty_frame,
)

I64, I32, STR = pl.Int64, pl.Int32, pl.String
GPU_KIND, CPU_KIND = pl.Enum(GPU_KINDS), pl.Enum(CPU_KINDS)
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)
ANNOTATION_KIND = pl.Enum(ANNOTATION_KINDS)

# CUPTI enums (ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND, ENUM_CUPTI_SYNC_TYPE). Array memory is
# device memory, and unified-memory copies keep their direction.
COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD",
             8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEMORY_KIND = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device",
               6: "managed"}
SYNC_TYPE = {0: "unknown", 1: "event", 2: "stream_wait", 3: "stream", 4: "context"}
#: Name of a whole-graph execution (graph-level CUDA graph tracing).
GRAPH_NAME = "[CUDA graph {}]"
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75
NVTX_TYPES = (NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE)
#: eventClass of driver API calls in CUPTI_ACTIVITY_KIND_RUNTIME (ENUM_NSYS_EVENT_CLASS).
EVENT_CLASS_DRIVER = 1
#: CUDA version suffix of API names: cudaLaunchKernel_v7000 -> cudaLaunchKernel. A 4- or
#: 5-digit number, so that cudaStreamGetCaptureInfo_v2_v11030 keeps its own "_v2".
API_VERSION_SUFFIX = r"_v\d{4,5}$"
#: The operator in a PyTorch NVTX range name: "aten::addmm, seq = 3, op_id = 7" -> "aten::addmm".
#: Operator namespaces are lower case (aten, c10d, prim, _c10d_functional); record_function
#: ranges such as "FSDP::pre_forward" are not operators, as on the Kineto path.
OPERATOR_NAME = r"^([a-z_]\w*(?:::\w+)+)(?:,|$)"
OPERATOR_PREFIX = r"^[a-z_]\w*::"
STEP_PREFIX = "ProfilerStep#"
STEP_NAME = r"^ProfilerStep#(\d+)$"

#: Up to this many ranks, rank-of-pid is a chain of comparisons instead of a hash join.
RANK_CHAIN_MAX = 16


def _pid(col: str) -> pl.Expr:
    return (pl.col(col) // (1 << 24)) % (1 << 24)


def _tid(col: str) -> pl.Expr:
    return pl.col(col) % (1 << 24)



def gpu_rows(strings: pl.DataFrame, kernels: pl.DataFrame | None, memcpy: pl.DataFrame | None,
              memset: pl.DataFrame | None, graphs: pl.DataFrame | None = None) -> pl.DataFrame:
    """Kernels, copies and memsets in one frame, with names and categories. Copies and
    memsets get their Kineto-style name ("Memcpy HtoD (Pageable -> Device)") so reports read
    the same whichever profiler wrote the trace.

    Columns get their canonical dtypes here (enums, int32), before the frame is sorted: the
    sort moves every byte of every column. Each part gets its own name and category, so no
    per-row choice between them is needed after the concat (a when/then or coalesce of string
    columns is dear per row: bench/NOTES.md)."""
    parts = []
    category = GPU_ACTIVITY_SCHEMA["category"]
    common = dict(device=pl.col("deviceId").cast(I32, strict=False), stream=pl.col("streamId"),
                  start_ns=pl.col("start"), end_ns=pl.col("end"),
                  correlation=pl.col("correlationId"), pid=_pid("globalPid"),
                  graph_launched=pl.col("graphNodeId").is_not_null())
    if kernels is not None:
        name_id = pl.coalesce(*(c for c in ("demangledName", "shortName") if c in kernels.columns))
        kernels = kernels.with_columns(name_id=name_id)
        # Name and category per distinct kernel name id (the regexes never run once per row),
        # mapped onto the rows through small tables.
        names = _names(strings, kernels["name_id"], "<unknown kernel {}>").with_columns(
            category=pl.when("known").then(kernel_category(pl.col("value")))
            .otherwise(pl.lit("other")).cast(category),
        )
        name_id = pl.col("name_id")
        parts.append(kernels.select(
            kind=pl.lit("kernel", GPU_KIND),
            # A kernel whose name id is missing (not an integer in a forged export) is named
            # as one whose id is unknown, never left without a name.
            name=name_id.replace_strict(names["id"], names["value"], default=None,
                                        return_dtype=STR).fill_null("<unknown kernel>"),
            category=name_id.replace_strict(names["id"], names["category"], default="other",
                                            return_dtype=category),
            **common,
            **{new: pl.col(old).cast(I32, strict=False) for new, old in (
                ("grid_x", "gridX"), ("grid_y", "gridY"), ("grid_z", "gridZ"),
                ("block_x", "blockX"), ("block_y", "blockY"), ("block_z", "blockZ"),
                ("registers", "registersPerThread"))},
            shared_mem=pl.col("staticSharedMemory").fill_null(0)
            + pl.col("dynamicSharedMemory").fill_null(0),
        ))
    if memcpy is not None:
        parts.append(memcpy.select(
            kind=pl.lit("memcpy", GPU_KIND), category=pl.lit("memcpy", category), **common,
            bytes="bytes",
            copy_kind=pl.col("copyKind").replace_strict(COPY_KIND, default="other",
                                                        return_dtype=STR),
            src_kind=_memory_kind("srcKind"), dst_kind=_memory_kind("dstKind"),
        ).with_columns(name=pl.format(
            "Memcpy {} ({} -> {})", "copy_kind", _label("src_kind"), _label("dst_kind"),
        )).with_columns(_enums("copy_kind", "src_kind", "dst_kind")))
    if graphs is not None:
        # Graph-level tracing records no kernels, only each graph's execution: keep it as one
        # kernel-kind activity, so GPU busy time and launches stay right.
        parts.append(graphs.with_columns(graphNodeId=pl.lit(0, I64)).select(
            kind=pl.lit("kernel", GPU_KIND), name=pl.format(GRAPH_NAME, pl.col("graphId")),
            category=pl.lit("other", category),
            **common,
        ))
    if memset is not None:
        parts.append(memset.select(
            kind=pl.lit("memset", GPU_KIND), category=pl.lit("memset", category), **common,
            bytes="bytes",
            dst_kind=_memory_kind("memKind"),
        ).with_columns(name=pl.format("Memset ({})", _label("dst_kind")))
        .with_columns(_enums("dst_kind")))
    if not parts:
        return pl.DataFrame(schema={"kind": GPU_KIND, "pid": I64, "name": STR,
                                    "start_ns": I64})
    return pl.concat(parts, how="diagonal_relaxed")


def _enums(*cols: str) -> list[pl.Expr]:
    """``cols`` as their canonical enums, cast on the part that has them: after the concat
    they would be cast on every kernel row too (null there), at several times the cost."""
    return [pl.col(c).cast(GPU_ACTIVITY_SCHEMA[c]) for c in cols]


def _label(col: str) -> pl.Expr:
    return pl.col(col).fill_null("unknown").str.to_titlecase()


def _memory_kind(col: str) -> pl.Expr:
    return pl.col(col).replace_strict(MEMORY_KIND, default="other", return_dtype=STR)


def rank_map(gpu_raw: pl.DataFrame) -> pl.DataFrame:
    """pid -> rank for every process with GPU activity, ranks numbered by pid."""
    return (
        gpu_raw.select(pl.col("pid").drop_nulls().unique().sort())
        .with_columns(rank=pl.int_range(pl.len(), dtype=pl.Int32))
    )


def _with_rank(frame: FrameT, ranks: pl.DataFrame) -> FrameT:
    """Attach ``rank`` from ``pid``; processes without GPU activity get rank 0 (unknown)."""
    if ranks.height <= RANK_CHAIN_MAX:
        # A few comparisons per row cost a sixth of replace_strict's hash join.
        rank: pl.Expr = pl.lit(0, I32)
        for pid, r in reversed(ranks.rows()):  # (pid, rank) pairs of rank_map
            rank = pl.when(pl.col("pid") == pid).then(pl.lit(r, I32)).otherwise(rank)
    else:
        rank = pl.col("pid").replace_strict(ranks["pid"], ranks["rank"], default=0,
                                            return_dtype=I32)
    return frame.with_columns(rank=rank)


def _known(ranks: pl.DataFrame) -> pl.Expr:
    """Whether the row's process is a rank (has GPU activity): only the CPU frame needs it,
    so it is not built, and sorted, for the millions of GPU rows."""
    # Without pids on the GPU side (old exports) every process counts as known.
    return pl.col("pid").is_in(ranks["pid"].implode()).fill_null(False) | pl.lit(ranks.height == 0)


def _names(strings: pl.DataFrame, ids: pl.Series, unknown: str | None = None) -> pl.DataFrame:
    """id -> text for the given ids only (the late join: text is fetched per distinct id).

    With ``unknown`` (a format with one ``{}``), every id gets a row, and ids missing from
    ``StringIds`` get that text (``known`` false): labels are built per id, not per row."""
    wanted = pl.DataFrame({"id": ids.drop_nulls().unique()})
    if unknown is None:
        return strings.join(wanted, on="id", how="semi")
    return wanted.join(strings, on="id", how="left").select(
        "id", known=pl.col("value").is_not_null(),
        value=pl.coalesce("value", pl.format(unknown, pl.col("id"))),
    )


def gpu_frame(gpu_raw: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    if gpu_raw.height == 0:
        return empty_frame("gpu")
    # Rank after the sort, so that the sort has one column less to move.
    return conform(_with_rank(sorted_by(gpu_raw, "start_ns"), ranks), "gpu")


def nvtx_rows(nvtx: pl.DataFrame) -> pl.DataFrame:
    """The NVTX events of the types we read (all of them, in practice: then the frame itself,
    which a test of one column finds without copying every column), event types as one byte
    each for the sort to move."""
    keep = pl.col("eventType").is_in(NVTX_TYPES)
    if not nvtx.select(keep.fill_null(False).all()).item():
        nvtx = nvtx.filter(keep)
    return nvtx.with_columns(pl.col("eventType").cast(pl.Int8))



def runtime_rows(runtime: pl.DataFrame) -> pl.DataFrame:
    """The runtime calls as the CPU frame keeps them: pid and tid out of ``globalTid``, the
    kind out of ``eventClass`` (one byte). Run on the reader thread, so that the raw columns
    are freed before the CPU frame is built, when the GPU frame is already held (the ingest's
    peak: bench/NOTES.md, nsys memory)."""
    # eventClass says runtime or driver; without it, the name does (see cpu_frame).
    return _call_rows(runtime, pl.when(pl.col("eventClass") == EVENT_CLASS_DRIVER)
                      .then(pl.lit("driver", CPU_KIND))
                      .when(pl.col("eventClass").is_not_null()).then(pl.lit("runtime", CPU_KIND)))


def driver_rows(driver: pl.DataFrame) -> pl.DataFrame:
    """The driver calls (``CUPTI_ACTIVITY_KIND_DRIVER``), as :func:`runtime_rows`."""
    return _call_rows(driver, pl.lit("driver", CPU_KIND))


def _call_rows(calls: pl.DataFrame, kind: pl.Expr) -> pl.DataFrame:
    return calls.select("start", "end", "correlationId", "nameId", pid=_pid("globalTid"),
                        tid=_tid("globalTid"), kind=kind)


def cpu_frame(runtime: pl.DataFrame | None, driver: pl.DataFrame | None,
               strings: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """The CPU frame of the calls of :func:`runtime_rows` and :func:`driver_rows`."""
    parts = [f for f in (runtime, driver) if f is not None]
    if not parts:
        return empty_frame("cpu")
    calls = pl.concat(parts) if len(parts) > 1 else parts[0]
    del parts, runtime, driver
    # Per distinct name, not per call: the version-free name, and driver-or-runtime by name
    # for exports whose rows carry no eventClass; mapped onto the calls through small tables.
    names = _names(strings, calls["nameId"], "<unknown API {}>").select(
        "id", name=pl.col("value").str.replace(API_VERSION_SUFFIX, ""),
        kind=pl.when(~pl.col("known")).then(pl.lit(None, CPU_KIND))
        .when(pl.col("value").str.contains(r"^cu[A-Z]"))
        .then(pl.lit("driver", CPU_KIND)).otherwise(pl.lit("runtime", CPU_KIND)),
    )
    name_id = pl.col("nameId")
    every_kind = not calls["kind"].null_count()
    cpu = _with_rank(calls, ranks)
    del calls  # its columns are the CPU frame's: the sort frees each once it is sorted
    cpu = sorted_by(cpu, "start")
    # A process that launched no GPU work shares rank 0 with the real rank 0; its
    # correlation ids would join that rank's kernels by accident, so drop them. Where every
    # call is of a rank (the usual case) the column is kept as it is, not copied.
    every_known = cpu.select(_known(ranks).all()).item()
    cpu = cpu.with_columns(
        name=name_id.replace_strict(names["id"], names["name"], default=None, return_dtype=STR),
        correlation=pl.col("correlationId") if every_known
        else pl.when(_known(ranks)).then(pl.col("correlationId")),
        # Where every call has its eventClass (nsys >= 2023), the names are not needed.
        kind=pl.col("kind") if every_kind else pl.coalesce(
            "kind",
            name_id.replace_strict(names["id"], names["kind"], default=None,
                                   return_dtype=CPU_KIND),
            pl.lit("runtime", CPU_KIND),
        ),
        start_ns="start", end_ns="end",
    )
    return conform(cpu, "cpu")


def sync_frame(syncs: pl.DataFrame | None, cpu: pl.DataFrame,
                ranks: pl.DataFrame) -> pl.DataFrame:
    if syncs is None or syncs.height == 0:
        return empty_frame("syncs")
    code = pl.coalesce("syncType", "deprecatedSyncType")
    frame = _with_rank(syncs.with_columns(pid=_pid("globalPid")), ranks).with_columns(
        sync_type=code.replace_strict(SYNC_TYPE, default=None, return_dtype=STR)
        .fill_null(code.cast(STR)),
        device="deviceId", stream="streamId", start_ns="start", end_ns="end",
        correlation="correlationId",
    )
    # The record names no thread: take the tid of the API call that it belongs to.
    keys = ["rank", "pid", "correlation"]
    calls = (
        cpu.filter(pl.col("correlation").is_in(frame["correlation"].drop_nulls().implode()))
        .select(*keys, "tid")
        .unique(keys, keep="first")
    )
    frame = sorted_by(frame, "start_ns").join(calls, on=keys, how="left", maintain_order="left")
    return conform(frame, "syncs")


def annotation_frame(nvtx: pl.DataFrame | None, strings: pl.DataFrame, ranks: pl.DataFrame,
                      meta: TraceMeta) -> pl.DataFrame:
    """The annotations of ``nvtx``, which comes sorted by start (the reader sorts it)."""
    if nvtx is None or nvtx.height == 0:
        return empty_frame("annotations")
    is_domain = pl.col("eventType") == NVTX_DOMAIN_CREATE
    domains = nvtx.filter(is_domain).select("domainId", domain_name="text").unique(
        "domainId", keep="last"
    )
    ranges = pl.col("eventType") != NVTX_MARK
    unfinished = nvtx.filter(~is_domain & ranges & pl.col("end").is_null()).height
    if unfinished:
        meta.warnings.append(f"dropped {unfinished} NVTX ranges that never ended")
    # Millions of rows here: each intermediate frame and string column costs (copies, page
    # faults), so the rest is one lazy query, ids are mapped through small per-distinct-value
    # tables, and only the columns the export needs are built.
    events = nvtx.lazy().filter(~is_domain, ~ranges | pl.col("end").is_not_null())
    names: list[pl.Expr] = [pl.col("text")]
    if nvtx["textId"].null_count() < nvtx.height:
        text_ids = _names(strings, nvtx["textId"])
        names.append(pl.col("textId").replace_strict(text_ids["id"], text_ids["value"],
                                                     default=None, return_dtype=STR))
    if nvtx["text"].null_count():
        names.append(pl.lit(""))
    # Domain 0 is the default domain (no name); others are named by their create event.
    labels = (
        pl.DataFrame({"domainId": nvtx["domainId"].drop_nulls().unique()})
        .join(domains, on="domainId", how="left")
        .select("domainId", label=pl.coalesce(
            "domain_name", pl.when(pl.col("domainId") != 0).then(pl.col("domainId").cast(STR))
        ))
        .drop_nulls()
    )
    domain: pl.Expr = pl.lit(None, STR)
    if labels.height:
        domain = pl.col("domainId").replace_strict(labels["domainId"], labels["label"],
                                                   default=None, return_dtype=STR)
    del nvtx
    # ``when`` skips the regex for rows that do not start with the prefix.
    step = pl.when(pl.col("name").str.starts_with(STEP_PREFIX)).then(
        pl.col("name").str.extract(STEP_NAME).cast(I64, strict=False))
    ann = (
        _with_rank(events.with_columns(pid=_pid("globalTid"), tid=_tid("globalTid")), ranks)
        .with_columns(
            name=pl.coalesce(names) if len(names) > 1 else names[0],
            start_ns="start",
            end_ns=pl.when(ranges).then(pl.col("end")).otherwise(pl.col("start")),
            domain=domain,
        )
        .with_columns(step=step)
        .with_columns(kind=pl.when(pl.col("step").is_not_null())
                      .then(pl.lit("step", ANNOTATION_KIND)).otherwise(pl.lit("nvtx", ANNOTATION_KIND)))
    )
    return conform(ann, "annotations")


#: One integer per thread (pid and tid are 24-bit, as globalTid packs them): grouping and
#: as-of joins on one int64 key cost half of what they cost on two.
_THREAD = (pl.col("pid") * (1 << 24) + pl.col("tid")).alias("_thread")


def operator_ranges(ann: pl.DataFrame) -> pl.DataFrame:
    """The outermost operator ranges (NVTX named like ``aten::mm, seq = 5, op_id = 9``, as
    ``torch.autograd.profiler.emit_nvtx`` writes them) of each thread, with the operator name
    alone (``aten::mm``): what :func:`with_parent_op` looks calls up in. Built from the
    annotations alone, so it can be built while the runtime calls are still being read."""
    # A cheap anchored test on millions of names (it allocates nothing); names are gathered,
    # and the operator extracted, for the outermost ranges only.
    # PyTorch writes its ranges to the default domain; libraries use their own (CCCL's
    # "cub::DeviceRadixSort" is not a framework operator).
    ops = ann.select(
        _THREAD, _os="start_ns", _oe="end_ns", _i=pl.int_range(pl.len(), dtype=pl.UInt32),
    ).filter(
        pl.col("_thread").is_not_null(), ann["domain"].is_null(),
        ann["name"].str.contains(OPERATOR_PREFIX),
    )
    # ``ann`` is sorted by start, so within each thread too: no sort needed for the running max.
    top = ops.filter(
        pl.col("_os")
        >= pl.col("_oe").cum_max().shift(1).over("_thread").fill_null(pl.col("_os"))
    )
    return top.select("_thread", "_os", "_oe",
                      _op=ann["name"].gather(top["_i"]).str.extract(OPERATOR_NAME))


def with_parent_op(cpu: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """``parent_op`` of each runtime/driver call: the outermost operator range of
    :func:`operator_ranges` that encloses the call on its thread.

    Ranges nest per thread, so the outermost ones do not overlap and an as-of join on their
    starts finds the one enclosing a call.
    """
    if ops.height == 0 or cpu.height == 0:
        return cpu
    # ``cpu`` is sorted by start as well, and an as-of join keeps the left order.
    found = cpu.select("start_ns", "end_ns", _THREAD).join_asof(
        ops.select("_thread", "_os", "_oe", _j=pl.int_range(pl.len(), dtype=pl.UInt32)),
        left_on="start_ns", right_on="_os", by="_thread", strategy="backward",
        check_sortedness=False,
    ).select(_j=pl.when(pl.col("_oe") >= pl.col("end_ns")).then(pl.col("_j")))["_j"]
    return cpu.with_columns(parent_op=ops["_op"].gather(found))


#: ENUM_CUDA_DEV_MEM_EVENT_OPER: 0 allocation, 1 deallocation.
MEM_FREE = 1
#: ENUM_CUDA_MEM_KIND of host memory (pageable, pinned): on no device.
HOST_MEM_KINDS = (0, 1)


def memory_frame(usage: pl.DataFrame | None, cpu: pl.DataFrame,
                 ranks: pl.DataFrame) -> pl.DataFrame:
    """Device allocations and frees: ``CUDA_GPU_MEMORY_USAGE_EVENTS`` where the export has it
    (sizes, addresses, the running total per device as ``reserved_bytes``), else the runtime's
    allocation calls themselves (no sizes). ``api`` and ``tid`` come from the runtime call of
    the same correlation id."""
    keys = ["rank", "pid", "correlation"]
    calls = cpu.filter(pl.col("name").is_in(ALLOCATION_APIS))
    if usage is None or usage.height == 0:
        if calls.height == 0:
            return empty_frame("memory")
        return conform(calls.select("rank", "pid", "tid", ts_ns="start_ns", api="name",
                                    source=pl.lit("driver")), "memory")
    host = pl.col("memKind").is_in(HOST_MEM_KINDS)
    frame = _with_rank(usage.with_columns(pid=_pid("globalPid")), ranks).select(
        "rank", "pid", ts_ns="start",
        device=pl.when(~host | pl.col("memKind").is_null()).then("deviceId"),
        bytes=pl.when(pl.col("memoryOperationType") == MEM_FREE).then(-pl.col("bytes"))
        .otherwise("bytes"),
        address="address", correlation="correlationId", source=pl.lit("driver"),
    )
    by_call = calls.select(*keys, "tid", api="name").unique(keys, keep="first")
    frame = (
        sorted_by(frame, "ts_ns")
        .join(by_call, on=keys, how="left", maintain_order="left")
        .with_columns(reserved_bytes=DRIVER_RESERVED)
    )
    return conform(frame, "memory")
