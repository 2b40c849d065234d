"""Nsight Systems SQLite exports (``nsys export --type sqlite``) into canonical frames.

Table -> frame mapping (docs/nsys.md has the full story):

- ``CUPTI_ACTIVITY_KIND_KERNEL``/``_MEMCPY``/``_MEMSET`` -> ``gpu``
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``_DRIVER`` where present) -> ``cpu`` kinds runtime/driver
- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` -> ``syncs``
- ``NVTX_EVENTS`` -> ``annotations`` (kind "nvtx"; ``ProfilerStep#N`` ranges are kind "step")
- ``TARGET_INFO_GPU``/``TARGET_INFO_CUDA_DEVICE``, ``PROCESSES``, ``META_DATA_EXPORT`` -> meta
  (in :mod:`traceanalyzer.ingest.nsys.meta`)

The tables are read by :mod:`.tables`, turned into frames by :mod:`.frames`, and described by
:mod:`.meta`. Ranks: every process with GPU activity is a rank, numbered by pid (one process ->
rank 0).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import polars as pl

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.heap import release_freed
from traceanalyzer.ingest.nsys.frames import (
    NVTX_TYPES,
    annotation_frame,
    cpu_frame,
    driver_rows,
    gpu_frame,
    gpu_rows,
    memory_frame,
    nvtx_rows,
    operator_ranges,
    rank_map,
    runtime_rows,
    sync_frame,
    with_parent_op,
)
from traceanalyzer.ingest.nsys.meta import fill_meta
from traceanalyzer.ingest.nsys.sqlite_columns import engine
from traceanalyzer.ingest.nsys.tables import (
    DRIVER,
    GRAPH,
    I64,
    KERNEL,
    MEMCPY,
    MEMORY_USAGE,
    MEMSET,
    NSYS_MARKER_TABLES,
    NVTX,
    RUNTIME,
    STR,
    SYNC,
    ExportDb,
    TableReader,
    sqlite_problem,
)
from traceanalyzer.ingest.unpack import unpacked
from traceanalyzer.model import Trace, TraceMeta, empty_frame


def read_nsys(path: str | os.PathLike[str]) -> Trace:
    """Read an Nsight Systems SQLite export (plain or gzipped) into a canonical :class:`Trace`."""
    p = Path(path)
    if not p.is_file():
        raise InputError(p, "is not a file" if p.exists() else "no such file")
    with unpacked(p, ".sqlite") as file:
        db = ExportDb(file)
        try:
            trace = _read(db)
        except InputError as exc:  # name the file the user gave, not the unpacked copy
            raise InputError(p, exc.problem) from None
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # a damaged file's message
            raise InputError(p, sqlite_problem(exc)) from None
        finally:
            db.con.close()
    trace.meta.path = str(p)
    return trace


def _read(db: ExportDb) -> Trace:
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
    unique = strings.filter(pl.col("id").is_not_null()).unique("id", keep="first",
                                                               maintain_order=True)
    if unique.height < strings.height:  # nsys declares id the primary key; a forged file may not
        meta.warnings.append(f"StringIds holds {strings.height - unique.height} duplicate or "
                             "null ids; the first text of each id is used")
        strings = unique
    present = [t for t in (KERNEL, GRAPH, MEMCPY, MEMSET, RUNTIME, DRIVER, NVTX)
               if t in db.tables]
    nvtx_types = ", ".join(map(str, NVTX_TYPES))
    # Tables are read on a second thread (its own connection; connectorx and sqlite3 release
    # the GIL), in the order they are needed, while this thread builds the frames of the
    # tables already read: reading and building overlap on two cores. The runtime calls are
    # read last, so that what is left once all is read is short (the CPU frame and an as-of
    # join); each raw frame is dropped once its canonical frame is built.
    with TableReader(db) as reader:
        tables = {t: reader.submit(t) for t in (KERNEL, MEMCPY, MEMSET, GRAPH)}
        # The event types are tested here, not in SQL: an IN list costs SQLite more per row
        # than Polars' test (bench/NOTES.md, nsys round 4), and other types are rare.
        tables[NVTX] = reader.submit(
            NVTX, where="" if engine() != "sqlite3" else f"eventType IN ({nvtx_types})",
            sort_by="start", prepare=nvtx_rows,
        )
        tables[RUNTIME] = reader.submit(RUNTIME, sort_by="start", prepare=runtime_rows)
        tables[DRIVER] = reader.submit(DRIVER, prepare=driver_rows)
        tables |= {t: reader.submit(t) for t in (SYNC, MEMORY_USAGE)}
        raw = [tables.pop(t).result() for t in (KERNEL, MEMCPY, MEMSET, GRAPH)]
        gpu_raw = gpu_rows(strings, *raw)
        del raw
        release_freed()  # the raw kernel table's Arrow buffers (the C heap's)
        ranks = rank_map(gpu_raw)
        gpu = gpu_frame(gpu_raw, ranks)
        del gpu_raw
        ann = annotation_frame(tables.pop(NVTX).result(), strings, ranks, meta)
        ops = operator_ranges(ann)
        cpu = cpu_frame(tables.pop(RUNTIME).result(), tables.pop(DRIVER).result(), strings,
                         ranks)
        syncs, usage = tables.pop(SYNC).result(), tables.pop(MEMORY_USAGE).result()
        syn = sync_frame(syncs, cpu, ranks)
        mem = memory_frame(usage, cpu, ranks)
        del syncs, usage
        release_freed()  # the raw runtime table's
        unreadable = {**db.unreadable, **reader.db.unreadable}
        narrowed = db.narrowed + reader.db.narrowed
    cpu = with_parent_op(cpu, ops)
    del ops
    _warn_ids(meta, unreadable, narrowed)

    fill_meta(db, meta, export, ranks, gpu)
    if not present:
        meta.warnings.append("the export holds no CUDA or NVTX events")
    if ranks.height == 1 and meta.rank:
        # A per-rank report (nsys launched by torchrun): its one GPU process is that rank.
        gpu, cpu, ann, syn, mem = (f.with_columns(rank=pl.lit(meta.rank, pl.Int32))
                                   for f in (gpu, cpu, ann, syn, mem))
    gpu, cpu, ann, syn = (_no_backwards(f, meta) for f in (gpu, cpu, ann, syn))
    return Trace(meta=meta, gpu=gpu, cpu=cpu, annotations=ann, syncs=syn,
                 counters=empty_frame("counters"), memory=mem)


def _warn_ids(meta: TraceMeta, unreadable: dict[str, int], narrowed: int) -> None:
    """Say how many ids were read as missing: values of id columns that are not integers
    within int64 (text, blobs, or reals, which is what SQLite makes of an integer beyond
    int64), and device ids, grid and block sizes or register counts beyond int32."""
    if unreadable:
        where = ", ".join(f"{n:,} in {col}" for col, n in sorted(unreadable.items())[:4])
        more = len(unreadable) - 4
        meta.warnings.append(
            f"read {sum(unreadable.values()):,} ids that are not integers within int64 (text, "
            f"blobs, or numbers beyond int64) as missing: {where}"
            + (f" and {more} more columns" if more > 0 else "")
        )
    if narrowed:
        meta.warnings.append(
            f"read {narrowed:,} device ids, grid or block sizes or register counts beyond "
            "int32 as missing"
        )


def _no_backwards(frame: pl.DataFrame, meta: TraceMeta) -> pl.DataFrame:
    """Records that end before they start (a corrupt export) become zero-length, with a warning,
    as in Kineto traces: every analysis may assume end_ns >= start_ns."""
    bad = frame.select((pl.col("end_ns") < pl.col("start_ns")).sum()).item()
    if not bad:
        return frame
    meta.warnings.append(f"{bad} records end before they start; treated as zero-length")
    return frame.with_columns(end_ns=pl.max_horizontal("start_ns", "end_ns"))



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
            memory=trace.memory.filter(by_pid).with_columns(rank=pl.lit(rank, pl.Int32)),
        ))
    return out
