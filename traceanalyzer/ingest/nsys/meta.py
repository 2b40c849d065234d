"""Nsight Systems exports: what an export says about itself -- devices, time base, ranks, versions.

Split from :mod:`traceanalyzer.ingest.nsys.reader`, which calls :func:`fill_meta` once the frames are
built. Only small metadata tables are read here, with plain SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.model import Device, TraceMeta

if TYPE_CHECKING:
    from traceanalyzer.ingest.nsys.tables import ExportDb as NsysDb


def fill_meta(db: NsysDb, meta: TraceMeta, export: Mapping[str, str], ranks: pl.DataFrame,
               gpu: pl.DataFrame) -> None:
    meta.devices = _devices(db, gpu)
    meta.world_size = max(ranks.height, 1)
    meta.time_base_ns = _time_base(db, export)
    names = dict(db.rows("SELECT pid, name FROM PROCESSES"))
    processes = [
        {"pid": pid, "rank": rank, "name": names.get(pid)}
        for pid, rank in ranks.select("pid", "rank").iter_rows()
    ]
    env_rank = _env_rank(db)
    if env_rank is not None and ranks.height == 1:
        meta.rank, meta.world_size = env_rank
        processes[0]["rank"] = meta.rank
    meta.extra["nsys"] = {
        "product_version": export.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": export.get("EXPORT_SCHEMA_VERSION"),
        # The GPU processes, one per rank: what split_by_process cuts along.
        "processes": processes,
    }


def _time_base(db: NsysDb, export: Mapping[str, str]) -> int | None:
    """Offset from trace times to Unix epoch ns: export times count from the session start.

    (``systemClockNs`` is the target clock at that start, not the clock of the times: an RTX 3080
    export has kernels 1.5 s into the session and a systemClockNs of 6 days.) A time-normalized
    or time-shifted export has another origin, which it does not record: no offset then.
    """
    table = "TARGET_INFO_SESSION_START_TIME"
    if table not in db.tables or "utcEpochNs" not in db.columns(table):
        return None
    if (export.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true"
            or export.get("EXPORT_PARAM_TIME_SHIFT", "0") not in ("0", "")):
        return None
    row = db.rows(f"SELECT utcEpochNs FROM {table}")
    return int(row[0][0]) if row and row[0][0] is not None else None


def _env_rank(db: NsysDb) -> tuple[int, int] | None:
    """RANK and WORLD_SIZE from the environment nsys ran in, when torchrun launched nsys."""
    rows = db.rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")
    if not rows or not rows[0][0]:
        return None
    env = rows[0][0]
    rank = re.search(r"(?:^|;)RANK=(\d+)(?:;|$)", env)
    world = re.search(r"(?:^|;)WORLD_SIZE=(\d+)(?:;|$)", env)
    if not rank or not world or int(rank.group(1)) >= int(world.group(1)):
        return None
    return int(rank.group(1)), int(world.group(1))


def _devices(db: NsysDb, gpu: pl.DataFrame) -> list[Device]:
    devices: dict[int, dict[str, Any]] = {}
    if "TARGET_INFO_GPU" in db.tables:
        cols = db.columns("TARGET_INFO_GPU")
        want = [c for c in ("id", "name", "smCount", "totalMemory", "computeMajor",
                            "computeMinor") if c in cols]
        if "id" in want:
            for row in db.rows(f"SELECT {', '.join(want)} FROM TARGET_INFO_GPU"):
                rec = dict(zip(want, row, strict=True))
                cc = (f"{rec['computeMajor']}.{rec['computeMinor']}"
                      if rec.get("computeMajor") is not None else None)
                devices[int(rec["id"])] = dict(
                    name=rec.get("name"), sm_count=rec.get("smCount"),
                    memory_bytes=rec.get("totalMemory"), compute_capability=cc,
                )
    if "TARGET_INFO_CUDA_DEVICE" in db.tables:
        cols = db.columns("TARGET_INFO_CUDA_DEVICE")
        key = "gpuId" if "gpuId" in cols else "cudaId"
        if key in cols and "numMultiprocessors" in cols:
            for dev_id, sms in db.rows(
                f"SELECT {key}, numMultiprocessors FROM TARGET_INFO_CUDA_DEVICE"
            ):
                if dev_id is not None:
                    rec = devices.setdefault(int(dev_id), {})
                    if rec.get("sm_count") is None:
                        rec["sm_count"] = sms
    for dev_id in gpu["device"].drop_nulls().unique().to_list():
        devices.setdefault(int(dev_id), {})
    return [Device(id=i, vendor="nvidia", **devices[i]) for i in sorted(devices)]
