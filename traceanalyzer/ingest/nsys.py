"""Nsight Systems SQLite exports (``nsys export --type sqlite``) into canonical frames.

Table -> frame mapping (docs/nsys.md has the full story):

- ``CUPTI_ACTIVITY_KIND_KERNEL``/``_MEMCPY``/``_MEMSET`` -> ``gpu``
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``_DRIVER`` where present) -> ``cpu`` kinds runtime/driver
- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` -> ``syncs``
- ``NVTX_EVENTS`` -> ``annotations`` (kind "nvtx"; ``ProfilerStep#N`` ranges are kind "step")
- ``TARGET_INFO_GPU``/``TARGET_INFO_CUDA_DEVICE``, ``PROCESSES``, ``META_DATA_EXPORT`` -> meta
  (in :mod:`traceanalyzer.ingest.nsys_meta`)

Names stay ids into ``StringIds`` while rows are filtered and joined; the text is joined in at
the end, and kernel categories are computed once per distinct name, not once per row.

Ranks: every process with GPU activity is a rank, numbered by pid (one process -> rank 0).
``globalPid``/``globalTid`` pack the pid as ``(g >> 24) & 0xFFFFFF`` and the tid as
``g & 0xFFFFFF``. Correlation ids are only unique within a process, so kernels join their
launching call on (correlation, rank) -- the same as Nsight's (correlationId, pid).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from traceanalyzer.categories import kernel_category
from traceanalyzer.errors import InputError
from traceanalyzer.ingest.nsys_meta import fill_meta
from traceanalyzer.ingest.sqlite_columns import connect_readonly, engine, read_table
from traceanalyzer.model import (
    ANNOTATION_KINDS,
    CPU_KINDS,
    GPU_ACTIVITY_SCHEMA,
    GPU_KINDS,
    Trace,
    TraceMeta,
    conform,
    empty_frame,
)

I64, I32, STR = pl.Int64, pl.Int32, pl.String
GPU_KIND, CPU_KIND = pl.Enum(GPU_KINDS), pl.Enum(CPU_KINDS)
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)
ANNOTATION_KIND = pl.Enum(ANNOTATION_KINDS)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
#: Whole CUDA graph executions, recorded instead of their kernels with --cuda-graph-trace=graph.
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"

#: Per table: (required columns, optional columns). A table that is present but lacks a required
#: column is an error (a renamed column in an nsys version we do not know); optional ones -> null.
TABLE_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    KERNEL: (
        ("start", "end", "deviceId", "streamId", "correlationId"),
        ("globalPid", "demangledName", "shortName", "gridX", "gridY", "gridZ", "blockX",
         "blockY", "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory",
         "graphNodeId"),
    ),
    RUNTIME: (("start", "end", "correlationId", "globalTid", "nameId"), ("eventClass",)),
    DRIVER: (("start", "end", "correlationId", "globalTid", "nameId"), ()),
    MEMCPY: (
        ("start", "end", "deviceId", "streamId", "bytes", "copyKind"),
        ("correlationId", "globalPid", "srcKind", "dstKind", "graphNodeId"),
    ),
    GRAPH: (("start", "end", "deviceId", "streamId", "graphId"), ("correlationId", "globalPid")),
    MEMSET: (
        ("start", "end", "deviceId", "streamId", "bytes"),
        ("correlationId", "globalPid", "memKind", "graphNodeId"),
    ),
    SYNC: (
        ("start", "end"),
        ("deviceId", "streamId", "correlationId", "globalPid", "syncType", "deprecatedSyncType"),
    ),
    NVTX: (("start", "eventType"), ("end", "globalTid", "text", "textId", "domainId")),
    "StringIds": (("id", "value"), ()),
}
#: Of these, at least one must be present.
ONE_OF: dict[str, tuple[str, ...]] = {
    KERNEL: ("demangledName", "shortName"),
    SYNC: ("syncType", "deprecatedSyncType"),
    NVTX: ("text", "textId"),
}
TEXT_COLUMNS = {"text", "value"}

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

NSYS_MARKER_TABLES = ("StringIds", "META_DATA_EXPORT")


#: Up to this many ranks, rank-of-pid is a chain of comparisons instead of a hash join.
RANK_CHAIN_MAX = 16


def _pid(col: str) -> pl.Expr:
    return (pl.col(col) // (1 << 24)) % (1 << 24)


def _tid(col: str) -> pl.Expr:
    return pl.col(col) % (1 << 24)


class _Db:
    """The open export: its table schemas, and typed reads of the columns we use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.con = connect_readonly(path)
            rows = self.con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(path, _sqlite_problem(exc)) from None
        self.tables = {r[0] for r in rows}

    def columns(self, table: str) -> dict[str, str]:
        info = self.con.execute(f'PRAGMA table_info("{table}")').fetchall()
        return {r[1]: (r[2] or "").upper() for r in info}

    def read(self, table: str, where: str = "") -> pl.DataFrame | None:
        """The table's known columns with declared types; None when the table is absent."""
        if table not in self.tables:
            return None
        required, optional = TABLE_COLUMNS[table]
        have = self.columns(table)
        missing = [c for c in required if c not in have]
        one_of = ONE_OF.get(table, ())
        if one_of and not any(c in have for c in one_of):
            missing.append(" or ".join(one_of))
        if missing:
            raise InputError(
                self.path,
                f"table {table} lacks column(s) {', '.join(missing)}: not an Nsight Systems "
                "export this version of traceanalyzer knows",
            )
        wanted = {c: (STR if c in TEXT_COLUMNS else I64) for c in (*required, *optional)
                  if c in have}
        if table == KERNEL and "demangledName" in have:
            wanted.pop("shortName", None)  # only a fallback for exports without demangled names
        frame = None
        if table == NVTX and {"text", "textId"} <= have.keys() and "StringIds" in self.tables:
            # Registered strings looked up in SQL: one column less to read (millions of rows),
            # and the text of an id is that of the id's StringIds row in any case.
            frame = read_table(
                self.con, self.path, table, {c: t for c, t in wanted.items() if c != "textId"},
                where, exprs={"text": 'ifnull("text", (SELECT value FROM StringIds '
                                      'WHERE id = "textId"))'},
            )
            if frame is not None:
                frame = frame.with_columns(textId=pl.lit(None, I64))
        if frame is None:
            frame = read_table(self.con, self.path, table, wanted, where)
        assert frame is not None
        absent = {c: pl.lit(None, I64) for c in optional if c not in have}
        return frame.with_columns(**absent) if absent else frame

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """A small metadata query; an absent table or column gives no rows."""
        try:
            return self.con.execute(query).fetchall()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise
            return []


class _Reader:
    """Reads tables on one background thread, through a connection of its own, in the order
    they were submitted. On exit, reads not yet started are cancelled and the rest awaited."""

    def __init__(self, db: _Db) -> None:
        self.db = _Db(db.path)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys-read")

    def submit(self, table: str, where: str = "", sort_by: str | None = None,
               prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
               ) -> Future[pl.DataFrame | None]:
        """The table, read on the background thread; sorted there by ``sort_by`` if given, so
        the sort overlaps work on this thread and the unsorted frame is freed before the
        result is handed over. ``prepare`` (rows filtered, say) runs there before the sort."""
        return self.pool.submit(self._read, table, where, sort_by, prepare)

    def _read(self, table: str, where: str, sort_by: str | None,
              prepare: Callable[[pl.DataFrame], pl.DataFrame] | None) -> pl.DataFrame | None:
        frame = self.db.read(table, where)
        if frame is None:
            return None
        if prepare is not None:
            frame = prepare(frame)
        return frame if sort_by is None else _sorted(frame, sort_by)

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.db.con.close()


def _sqlite_problem(exc: Exception) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return "the SQLite database is locked by another process (is nsys still writing it?)"
    if "not a database" in text or "malformed" in text or "encrypted" in text:
        return f"is not a readable SQLite database ({text})"
    return f"cannot be read as SQLite ({text})"


def read_nsys(path: str | os.PathLike[str]) -> Trace:
    """Read an Nsight Systems SQLite export into a canonical :class:`Trace`."""
    p = Path(path)
    if not p.is_file():
        raise InputError(p, "is not a file" if p.exists() else "no such file")
    db = _Db(p)
    try:
        return _read(db)
    except sqlite3.DatabaseError as exc:
        raise InputError(p, _sqlite_problem(exc)) from None
    finally:
        db.con.close()


def _read(db: _Db) -> Trace:
    if not any(t in db.tables for t in NSYS_MARKER_TABLES):
        raise InputError(
            db.path,
            "is a SQLite database but not an Nsight Systems export (no StringIds or "
            "META_DATA_EXPORT table)",
        )
    export = dict(db.rows("SELECT name, value FROM META_DATA_EXPORT"))
    meta = TraceMeta(path=str(db.path), source_format="nsys")
    version = export.get("EXPORT_PRODUCT_VERSION")
    meta.profiler = f"Nsight Systems {version}" if version else "Nsight Systems"

    strings = db.read("StringIds")
    if strings is None:
        strings = pl.DataFrame(schema={"id": I64, "value": STR})
    present = [t for t in (KERNEL, GRAPH, MEMCPY, MEMSET, RUNTIME, DRIVER, NVTX)
               if t in db.tables]
    nvtx_types = ", ".join(map(str, NVTX_TYPES))
    # Tables are read on a second thread (its own connection; connectorx and sqlite3 release
    # the GIL), in the order they are needed, while this thread builds the frames of the
    # tables already read: reading and building overlap on two cores. The runtime calls are
    # read last, so that what is left once all is read is short (the CPU frame and an as-of
    # join); each raw frame is dropped once its canonical frame is built.
    with _Reader(db) as reader:
        tables = {t: reader.submit(t) for t in (KERNEL, MEMCPY, MEMSET, GRAPH)}
        # The event types are tested here, not in SQL: an IN list costs SQLite more per row
        # (~30 ns, 0.25 CPU-s for 8 M rows) than Polars' test, and other types are rare.
        tables[NVTX] = reader.submit(
            NVTX, where="" if engine() == "connectorx" else f"eventType IN ({nvtx_types})",
            sort_by="start", prepare=_nvtx_rows,
        )
        tables[RUNTIME] = reader.submit(RUNTIME, sort_by="start")
        tables |= {t: reader.submit(t) for t in (DRIVER, SYNC)}
        gpu_raw = _gpu_rows(strings,
                            *(tables.pop(t).result() for t in (KERNEL, MEMCPY, MEMSET, GRAPH)))
        ranks = _rank_map(gpu_raw)
        gpu = _gpu_frame(gpu_raw, ranks)
        del gpu_raw
        ann = _annotation_frame(tables.pop(NVTX).result(), strings, ranks, meta)
        ops = _operator_ranges(ann)
        cpu = _cpu_frame(tables.pop(RUNTIME).result(), tables.pop(DRIVER).result(), strings,
                         ranks)
        syn = _sync_frame(tables.pop(SYNC).result(), cpu, ranks)
    cpu = _with_parent_op(cpu, ops)
    del ops

    fill_meta(db, meta, export, ranks, gpu)
    if not present:
        meta.warnings.append("the export holds no CUDA or NVTX events")
    if ranks.height == 1 and meta.rank:
        # A per-rank report (nsys launched by torchrun): its one GPU process is that rank.
        gpu, cpu, ann, syn = (f.with_columns(rank=pl.lit(meta.rank, pl.Int32))
                              for f in (gpu, cpu, ann, syn))
    gpu, cpu, ann, syn = (_no_backwards(f, meta) for f in (gpu, cpu, ann, syn))
    return Trace(meta=meta, gpu=gpu, cpu=cpu, annotations=ann, syncs=syn,
                 counters=empty_frame("counters"))


def _no_backwards(frame: pl.DataFrame, meta: TraceMeta) -> pl.DataFrame:
    """Records that end before they start (a corrupt export) become zero-length, with a warning,
    as in Kineto traces: every analysis may assume end_ns >= start_ns."""
    bad = frame.select((pl.col("end_ns") < pl.col("start_ns")).sum()).item()
    if not bad:
        return frame
    meta.warnings.append(f"{bad} records end before they start; treated as zero-length")
    return frame.with_columns(end_ns=pl.max_horizontal("start_ns", "end_ns"))


def _gpu_rows(strings: pl.DataFrame, kernels: pl.DataFrame | None, memcpy: pl.DataFrame | None,
              memset: pl.DataFrame | None, graphs: pl.DataFrame | None = None) -> pl.DataFrame:
    """Kernels, copies and memsets in one frame, with names and categories. Copies and
    memsets get their Kineto-style name ("Memcpy HtoD (Pageable -> Device)") so reports read
    the same whichever profiler wrote the trace.

    Columns get their canonical dtypes here (enums, int32), before the frame is sorted: the
    sort moves every byte of every column. Each part gets its own name and category, so no
    per-row choice between them is needed after the concat (a when/then or coalesce of string
    columns costs ~45 ns a row)."""
    parts = []
    category = GPU_ACTIVITY_SCHEMA["category"]
    common = dict(device=pl.col("deviceId").cast(I32), stream=pl.col("streamId"),
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
            name=name_id.replace_strict(names["id"], names["value"], default=None,
                                        return_dtype=STR),
            category=name_id.replace_strict(names["id"], names["category"], default="other",
                                            return_dtype=category),
            **common,
            **{new: pl.col(old).cast(I32) for new, old in (
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
    they would be cast on every kernel row too (null there), at 5x the cost."""
    return [pl.col(c).cast(GPU_ACTIVITY_SCHEMA[c]) for c in cols]


def _label(col: str) -> pl.Expr:
    return pl.col(col).fill_null("unknown").str.to_titlecase()


def _memory_kind(col: str) -> pl.Expr:
    return pl.col(col).replace_strict(MEMORY_KIND, default="other", return_dtype=STR)


def _rank_map(gpu_raw: pl.DataFrame) -> pl.DataFrame:
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
        for pid, r in reversed(ranks.rows()):  # (pid, rank) pairs of _rank_map
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


def _gpu_frame(gpu_raw: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    if gpu_raw.height == 0:
        return empty_frame("gpu")
    # Rank after the sort, so that the sort has one column less to move.
    return conform(_with_rank(_sorted(gpu_raw, "start_ns"), ranks), "gpu")


def _nvtx_rows(nvtx: pl.DataFrame) -> pl.DataFrame:
    """The NVTX events of the types we read (all of them, in practice: then the frame itself,
    which a test of one column finds without copying every column), event types as one byte
    each for the sort to move."""
    keep = pl.col("eventType").is_in(NVTX_TYPES)
    if not nvtx.select(keep.fill_null(False).all()).item():
        nvtx = nvtx.filter(keep)
    return nvtx.with_columns(pl.col("eventType").cast(pl.Int8))


def _sorted(frame: pl.DataFrame, col: str) -> pl.DataFrame:
    """``frame`` sorted by ``col``; exports are mostly in order already, and a check is cheap."""
    if frame.height < 2 or frame.select((pl.col(col).diff().drop_nulls() >= 0).all()).item():
        return frame
    # One chunk first: gathers from a frame of many chunks (one per connectorx batch) cost
    # twice as much as a copy into one chunk and a gather from it.
    return frame.rechunk().sort(col, maintain_order=True)


def _cpu_frame(runtime: pl.DataFrame | None, driver: pl.DataFrame | None,
               strings: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    parts = []
    if runtime is not None:
        # eventClass says runtime or driver; without it, the name does (see below).
        parts.append(runtime.select(
            "start", "end", "correlationId", "globalTid", "nameId",
            kind=pl.when(pl.col("eventClass") == EVENT_CLASS_DRIVER).then(pl.lit("driver", CPU_KIND))
            .when(pl.col("eventClass").is_not_null()).then(pl.lit("runtime", CPU_KIND)),
        ))
    if driver is not None:
        parts.append(driver.select("start", "end", "correlationId", "globalTid", "nameId",
                                   kind=pl.lit("driver", CPU_KIND)))
    if not parts:
        return empty_frame("cpu")
    calls = pl.concat(parts)
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
    cpu = _with_rank(calls.with_columns(pid=_pid("globalTid"), tid=_tid("globalTid")), ranks)
    cpu = _sorted(cpu, "start").with_columns(
        name=name_id.replace_strict(names["id"], names["name"], default=None, return_dtype=STR),
        # A process that launched no GPU work shares rank 0 with the real rank 0; its
        # correlation ids would join that rank's kernels by accident, so drop them.
        correlation=pl.when(_known(ranks)).then(pl.col("correlationId")),
        # Where every call has its eventClass (nsys >= 2023), the names are not needed.
        kind=pl.col("kind") if not calls["kind"].null_count() else pl.coalesce(
            "kind",
            name_id.replace_strict(names["id"], names["kind"], default=None,
                                   return_dtype=CPU_KIND),
            pl.lit("runtime", CPU_KIND),
        ),
        start_ns="start", end_ns="end",
    )
    return conform(cpu, "cpu")


def _sync_frame(syncs: pl.DataFrame | None, cpu: pl.DataFrame,
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
    frame = _sorted(frame, "start_ns").join(calls, on=keys, how="left", maintain_order="left")
    return conform(frame, "syncs")


def _annotation_frame(nvtx: pl.DataFrame | None, strings: pl.DataFrame, ranks: pl.DataFrame,
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


def _operator_ranges(ann: pl.DataFrame) -> pl.DataFrame:
    """The outermost operator ranges (NVTX named like ``aten::mm, seq = 5, op_id = 9``, as
    ``torch.autograd.profiler.emit_nvtx`` writes them) of each thread, with the operator name
    alone (``aten::mm``): what :func:`_with_parent_op` looks calls up in. Built from the
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


def _with_parent_op(cpu: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """``parent_op`` of each runtime/driver call: the outermost operator range of
    :func:`_operator_ranges` that encloses the call on its thread.

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


def split_by_process(trace: Trace) -> list[Trace]:
    """One :class:`Trace` per rank of a multi-process export, in rank order.

    Each GPU process is a rank (see the module doc). GPU rows are cut by ``rank``; CPU rows,
    annotations and syncs by the rank's pid, so processes without GPU activity (launchers,
    loggers) are left out. A single-process trace comes back as a one-element list.
    """
    processes = trace.meta.extra.get("nsys", {}).get("processes", [])
    if len(processes) <= 1:
        return [trace]
    out = []
    for proc in processes:
        rank, pid = proc["rank"], proc["pid"]
        meta = TraceMeta.from_dict(trace.meta.to_dict())
        meta.rank, meta.world_size = rank, len(processes)
        meta.extra["nsys"] = {**meta.extra["nsys"], "processes": [proc]}
        by_pid = pl.col("pid") == pid
        out.append(Trace(
            meta=meta,
            gpu=trace.gpu.filter(pl.col("rank") == rank),
            cpu=trace.cpu.filter(by_pid),
            annotations=trace.annotations.filter(by_pid),
            syncs=trace.syncs.filter(by_pid),
            counters=trace.counters.filter(by_pid),
        ))
    return out
