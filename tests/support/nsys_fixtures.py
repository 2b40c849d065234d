"""A builder for small synthetic Nsight Systems SQLite exports, with the columns nsys declares.

Only the tables and columns the ingestor reads (plus a few it ignores) are created, with the
declared types of nsys 2024-2026 exports. Tables without rows are not created at all, as nsys
does; ``TARGET_INFO_GPU`` is never created, to cover exports that lack it.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

# The hardware/VM bits nsys sets above the pid in globalPid/globalTid.
HW_BITS = 1 << 48

SCHEMAS: dict[str, str] = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "TARGET_INFO_CUDA_DEVICE": "gpuId INTEGER, cudaId INTEGER NOT NULL, pid INTEGER NOT NULL, "
                               "uuid TEXT, numMultiprocessors INTEGER",
    "TARGET_INFO_SYSTEM_ENV": "globalVid INTEGER, devStateName TEXT NOT NULL, name TEXT NOT NULL, "
                              "nameEnum INTEGER NOT NULL, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
        "mangledName INTEGER, launchType INTEGER, registersPerThread INTEGER NOT NULL, "
        "gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, "
        "blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
        "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, "
        "graphNodeId INTEGER, graphId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
        "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
        "returnValue INTEGER NOT NULL, callchainId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, "
        "srcKind INTEGER, dstKind INTEGER, graphNodeId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, "
        "graphNodeId INTEGER, memKind INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, deprecatedSyncType INTEGER, syncType INTEGER NOT NULL, "
        "eventId INTEGER NOT NULL"
    ),
    "CUDA_GPU_MEMORY_USAGE_EVENTS": (
        "start INTEGER NOT NULL, globalPid INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, address INTEGER NOT NULL, pc INTEGER NOT NULL, "
        "bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, memoryOperationType INTEGER NOT NULL, "
        "name TEXT, correlationId INTEGER, streamId INTEGER"
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
        "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
        "textId INTEGER, domainId INTEGER"
    ),
}


def global_tid(pid: int, tid: int | None = None) -> int:
    return HW_BITS | (pid << 24) | (pid if tid is None else tid)


def global_pid(pid: int) -> int:
    return HW_BITS | (pid << 24)


class NsysBuilder:
    """Collects rows, then writes them as an nsys-like SQLite export."""

    def __init__(self, version: str = "2025.3.1.90") -> None:
        self.rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.strings: dict[str, int] = {}
        self.corr: dict[int, int] = defaultdict(int)
        self.rows["META_DATA_EXPORT"] += [
            {"name": "EXPORT_PRODUCT_NAME", "value": "NVIDIA Nsight Systems"},
            {"name": "EXPORT_PRODUCT_VERSION", "value": version},
            {"name": "EXPORT_SCHEMA_VERSION", "value": "3.21.0"},
        ]

    def string(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = 1000 + len(self.strings)
        return self.strings[text]

    def _next_corr(self, pid: int) -> int:
        self.corr[pid] += 1
        return self.corr[pid]

    def api(self, name: str, start: int, dur: int, pid: int = 100, tid: int | None = None,
            event_class: int = 0, corr: int | None = None) -> int:
        corr = self._next_corr(pid) if corr is None else corr
        self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(dict(
            start=start, end=start + dur, eventClass=event_class, globalTid=global_tid(pid, tid),
            correlationId=corr, nameId=self.string(name), returnValue=0,
        ))
        return corr

    def launch(self, kernel: str, cpu_start: int, cpu_dur: int, gpu_start: int, gpu_dur: int,
               pid: int = 100, tid: int | None = None, device: int = 0, stream: int = 7,
               api: str = "cudaLaunchKernel_v7000", short: str | None = None,
               graph_node: int | None = None, launched: bool = True, **cols: Any) -> int:
        event_class = 1 if api.startswith("cu") and not api.startswith("cuda") else 0
        corr = (self.api(api, cpu_start, cpu_dur, pid, tid, event_class) if launched
                else self._next_corr(pid))
        row = dict(
            start=gpu_start, end=gpu_start + gpu_dur, deviceId=device, contextId=1,
            streamId=stream, correlationId=corr, globalPid=global_pid(pid),
            demangledName=self.string(kernel), shortName=self.string(short or kernel.split("<")[0]),
            registersPerThread=32, gridX=132, gridY=1, gridZ=1, blockX=256, blockY=1, blockZ=1,
            staticSharedMemory=1024, dynamicSharedMemory=2048, graphNodeId=graph_node,
        )
        row.update(cols)
        self.rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(row)
        return corr

    def memcpy(self, start: int, dur: int, nbytes: int, copy_kind: int, src: int | None,
               dst: int | None, pid: int = 100, device: int = 0, stream: int = 7,
               cpu_start: int | None = None, api: str = "cudaMemcpyAsync_v3020") -> int:
        corr = self.api(api, start - 1000 if cpu_start is None else cpu_start, 500, pid)
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(dict(
            start=start, end=start + dur, deviceId=device, contextId=1, streamId=stream,
            correlationId=corr, globalPid=global_pid(pid), bytes=nbytes, copyKind=copy_kind,
            srcKind=src, dstKind=dst,
        ))
        return corr

    def memset(self, start: int, dur: int, nbytes: int, mem_kind: int | None = 2,
               pid: int = 100, device: int = 0, stream: int = 7) -> int:
        corr = self.api("cudaMemsetAsync_v3020", start - 1000, 500, pid)
        self.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(dict(
            start=start, end=start + dur, deviceId=device, contextId=1, streamId=stream,
            correlationId=corr, globalPid=global_pid(pid), value=0, bytes=nbytes,
            memKind=mem_kind,
        ))
        return corr

    def sync(self, api: str, start: int, dur: int, sync_type: int, pid: int = 100,
             tid: int | None = None, device: int = 0, stream: int = 7) -> int:
        corr = self.api(api, start, dur, pid, tid)
        self.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(dict(
            start=start + 10, end=start + dur - 10, deviceId=device, contextId=1,
            streamId=stream, correlationId=corr, globalPid=global_pid(pid), syncType=sync_type,
            eventId=0,
        ))
        return corr

    def alloc(self, start: int, nbytes: int, address: int, *, free: bool = False,
              api: str | None = None, mem_kind: int = 2, pid: int = 100, device: int = 0) -> None:
        """A row of CUDA_GPU_MEMORY_USAGE_EVENTS (--cuda-memory-usage=true), with the runtime
        call that made it when ``api`` is given (start 0 and no call: before the capture)."""
        corr = self.api(api, start - 100, 90, pid) if api else None
        self.rows["CUDA_GPU_MEMORY_USAGE_EVENTS"].append(dict(
            start=start, globalPid=global_pid(pid), deviceId=device, contextId=1,
            address=address, pc=0, bytes=nbytes, memKind=mem_kind,
            memoryOperationType=1 if free else 0, correlationId=corr,
        ))

    def nvtx(self, text: str | None, start: int, end: int | None, event_type: int = 59,
             pid: int = 100, tid: int | None = None, registered: bool = False,
             domain: int = 0) -> None:
        self.rows["NVTX_EVENTS"].append(dict(
            start=start, end=end, eventType=event_type,
            text=None if registered else text,
            textId=self.string(text) if registered and text is not None else None,
            globalTid=global_tid(pid, tid), domainId=domain,
        ))

    def process(self, pid: int, name: str) -> None:
        self.rows["PROCESSES"].append(dict(globalPid=global_pid(pid), pid=pid, name=name))

    def write(self, path: Path, drop_columns: dict[str, list[str]] | None = None,
              skip_tables: tuple[str, ...] = ()) -> Path:
        """Write the export. ``drop_columns`` leaves columns out of a table's schema, as an
        older or newer nsys would."""
        drop = drop_columns or {}
        rows = dict(self.rows)
        rows["StringIds"] = [{"id": i, "value": s} for s, i in self.strings.items()]
        con = sqlite3.connect(path)
        for table, records in rows.items():
            if table in skip_tables or not records:
                continue
            cols = [c.strip() for c in SCHEMAS[table].split(",")]
            cols = [c for c in cols if c.split()[0] not in drop.get(table, [])]
            names = [c.split()[0] for c in cols]
            con.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
            con.executemany(
                f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                [[r.get(n) for n in names] for r in records],
            )
        con.commit()
        con.close()
        return path
