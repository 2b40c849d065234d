"""A Kineto trace's top-level metadata (devices, distributed info, versions) as :class:`TraceMeta`."""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

from traceanalyzer.ingest.kineto.jsonscan import ScanResult
from traceanalyzer.model import Device, TraceMeta


def read_metadata(path: Path, scan: ScanResult) -> TraceMeta:
    """The trace's metadata (what the scan kept besides the events) and the scan's warnings."""
    warnings = list(scan.warnings)
    if scan.truncated:
        warnings.append(
            f"trace is truncated ({scan.truncated_tail_bytes} bytes of an incomplete event at "
            "the end); analyzed the complete events before it"
        )
    top: Any
    try:
        # A BOM is allowed; cut here, not by the "utf-8-sig" codec, whose import a small
        # trace waits for (bench/NOTES.md, round 15).
        text = scan.metadata_json.removeprefix(codecs.BOM_UTF8).decode(errors="replace")
        top = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: metadata nested thousands deep
        top = {}
        if not scan.truncated:
            warnings.append("the trace's top-level metadata is not valid JSON; ignored it")
    if not isinstance(top, dict):
        top = {}
    props = top.get("deviceProperties")
    props = props if isinstance(props, list) else []  # a number or an object: read as missing
    devices = [_device(d, top) for d in props if isinstance(d, dict)]
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    base = top.get("baseTimeNanoseconds")
    extra = {k: top[k] for k in ("schemaVersion", "displayTimeUnit", "traceName", "cupti_version",
                                  "cuda_runtime_version", "roctracer_version",
                                  "hip_runtime_version", "record_shapes", "with_stack", "hostname")
             if k in top and isinstance(top[k], (int, float, str, bool))}
    if dist:
        extra["distributed"] = {k: v for k, v in dist.items()
                                if k in ("backend", "rank", "world_size", "nccl_version", "hostname")}
    return TraceMeta(
        path=str(path),
        source_format="kineto",
        profiler="PyTorch Profiler (Kineto)",
        devices=devices,
        rank=_int(dist.get("rank"), 0, bits=32),
        world_size=_int(dist.get("world_size"), 1, bits=32),
        time_base_ns=_int(base, None),
        warnings=warnings,
        extra=extra,
    )


def _device(d: dict[str, Any], top: dict[str, Any]) -> Device:
    name = str(d.get("name")) if d.get("name") is not None else None
    amd = any(k in top for k in ("roctracer_version", "hip_runtime_version")) or (
        name is not None and any(s in name for s in ("AMD", "Radeon", "Instinct"))
    )
    major, minor = d.get("computeMajor"), d.get("computeMinor")
    return Device(
        id=_int(d.get("id"), 0, bits=32),
        name=name,
        sm_count=_int(d.get("numSms"), None),
        memory_bytes=_int(d.get("totalGlobalMem"), None),
        compute_capability=f"{major}.{minor}" if major is not None else None,
        vendor="amd" if amd else "nvidia",
    )


def _int(value: Any, default: Any, bits: int = 64) -> Any:
    """``value`` as an int if it is one that fits a signed ``bits``-bit integer, else ``default``."""
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        return default
    return out if -(2 ** (bits - 1)) <= out < 2 ** (bits - 1) else default
