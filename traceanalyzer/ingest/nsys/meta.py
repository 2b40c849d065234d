"""Nsight Systems exports: what an export says about itself -- devices, time base, ranks, versions.

Split from :mod:`traceanalyzer.ingest.nsys.reader`, which calls :func:`fill_meta` once the frames are
built. Only small metadata tables are read here, with plain SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.ingest.bounds import TIME_LIMIT_NS, clean_text, small_int
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
    host = _hostname(db)
    if host:
        meta.extra["hostname"] = host
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
    # Anything but an integer within the time limit ('yesterday', 1e300) is no time base.
    return small_int(row[0][0], -TIME_LIMIT_NS + 1, TIME_LIMIT_NS - 1) if row else None


def _hostname(db: NsysDb) -> str | None:
    """The target's Hostname (TARGET_INFO_SYSTEM_ENV), printable, at most 255 characters."""
    if "TARGET_INFO_SYSTEM_ENV" not in db.tables:
        return None
    rows = db.rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")
    if not rows or not isinstance(rows[0][0], str):
        return None
    host = "".join(ch for ch in rows[0][0].strip() if ch.isprintable())[:255]
    return host or None


def _env_rank(db: NsysDb) -> tuple[int, int] | None:
    """RANK and WORLD_SIZE from the environment nsys ran in, when torchrun launched nsys."""
    rows = db.rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")
    if not rows or not rows[0][0]:
        return None
    env = rows[0][0]
    if not isinstance(env, str):
        return None
    rank_text = re.search(r"(?:^|;)RANK=(\d+)(?:;|$)", env)
    world_text = re.search(r"(?:^|;)WORLD_SIZE=(\d+)(?:;|$)", env)
    # Ranks are Int32 in the frames: a 5,000-digit or int64 rank is no rank.
    rank = small_int(rank_text.group(1), 0) if rank_text else None
    world = small_int(world_text.group(1), 1) if world_text else None
    if rank is None or world is None or rank >= world:
        return None
    return rank, world


def _devices(db: NsysDb, gpu: pl.DataFrame) -> list[Device]:
    devices: dict[int, dict[str, Any]] = {}
    if "TARGET_INFO_GPU" in db.tables:
        cols = db.columns("TARGET_INFO_GPU")
        want = [c for c in ("id", "name", "smCount", "totalMemory", "computeMajor",
                            "computeMinor") if c in cols]
        if "id" in want:
            for row in db.rows(f"SELECT {', '.join(want)} FROM TARGET_INFO_GPU"):
                rec = dict(zip(want, row, strict=True))
                # Any column may hold text, floats or blobs: numbers out of range are missing.
                dev_id = small_int(rec["id"])
                if dev_id is None:
                    continue
                major, minor = small_int(rec.get("computeMajor"), 0), small_int(
                    rec.get("computeMinor"), 0)
                cc = f"{major}.{minor if minor is not None else 0}" if major is not None else None
                name = rec.get("name")
                devices[dev_id] = dict(
                    name=clean_text(name) if isinstance(name, str) else None,
                    sm_count=small_int(rec.get("smCount"), 0),
                    memory_bytes=small_int(rec.get("totalMemory"), 0, TIME_LIMIT_NS),
                    compute_capability=cc,
                )
    if "TARGET_INFO_CUDA_DEVICE" in db.tables:
        cols = db.columns("TARGET_INFO_CUDA_DEVICE")
        key = "gpuId" if "gpuId" in cols else "cudaId"
        if key in cols and "numMultiprocessors" in cols:
            for dev_id, sms in db.rows(
                f"SELECT {key}, numMultiprocessors FROM TARGET_INFO_CUDA_DEVICE"
            ):
                dev_id = small_int(dev_id)
                if dev_id is not None:
                    rec = devices.setdefault(dev_id, {})
                    if rec.get("sm_count") is None:
                        rec["sm_count"] = small_int(sms, 0)
    for dev_id in gpu["device"].drop_nulls().unique().to_list():
        devices.setdefault(int(dev_id), {})
    return [Device(id=i, vendor="nvidia", **devices[i]) for i in sorted(devices)]
