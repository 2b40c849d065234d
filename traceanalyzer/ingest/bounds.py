"""Limits on the values a trace may hold, shared by every reader (docs/reliability.md).

Times are int64 nanoseconds. A time that is representable is not yet usable: a start near
int64's end wraps once a duration is added, and a span between two far-apart times overflows.
Every reader keeps only records whose start and end lie within ``±TIME_LIMIT_NS`` of the trace's
clock zero, so that any end, and any difference of two times, fits in int64. 2^62 ns is 146
years: Unix-epoch nanoseconds (1.8e18 in 2026) fit until 2116.
"""

from __future__ import annotations

import math
from typing import Any, Final

import polars as pl

from traceanalyzer.model import TIME_LIMIT_NS, Device, Trace, TraceMeta

#: The same limit on a Kineto timestamp's whole microseconds (so that start_ns stays within it).
TIME_LIMIT_US: Final = TIME_LIMIT_NS // 1000 - 1
#: A trace whose events span more than this is most likely wrong (µs mixed with ns, a clock
#: jump, a stray event): it is analyzed, with a warning.
PLAUSIBLE_SPAN_NS: Final = 86_400 * 1_000_000_000
#: Ids that the canonical frames hold as Int32 (device, stream, rank, ...).
INT32_MIN: Final = -(1 << 31)
INT32_MAX: Final = (1 << 31) - 1
#: Digits read from a number held as text (a rank in an environment string): more is not a number.
MAX_DIGITS: Final = 19


def in_time_range(value: int | None) -> bool:
    return value is not None and -TIME_LIMIT_NS < value < TIME_LIMIT_NS


def small_int(value: object, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int | None:
    """``value`` as an int within [lo, hi], or None: for numbers from a trace's metadata, which
    may be text, floats, blobs or thousands of digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    elif isinstance(value, (str, bytes)):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        text = text.strip()
        if not 0 < len(text.lstrip("+-")) <= MAX_DIGITS:
            return None
        try:
            value = int(text)
        except ValueError:
            return None
    if not isinstance(value, int):
        return None
    return value if lo <= value <= hi else None


# --- the checks every read goes through (ingest.read_any) --------------------------------------


def check_trace(trace: Trace) -> Trace:
    """The trace with the values no analysis can use made safe, each kind counted in a warning:

    - records whose start or end is missing or beyond ``±TIME_LIMIT_NS`` are dropped (a reader
      that met them already said so; this is the net under every reader);
    - text in the metadata is valid Unicode (a lone surrogate from JSON's ``"\\ud800"`` becomes
      U+FFFD), numbers in it are ints in range or missing;
    - a span of events longer than ``PLAUSIBLE_SPAN_NS`` (µs mixed with ns, a clock jump) is
      analyzed as it is, with a warning that says so and where the biggest gap lies.
    """
    meta = trace.meta
    frames = {}
    dropped = 0
    for name, frame in trace.frames().items():
        cols = [c for c in ("start_ns", "end_ns", "ts_ns") if c in frame.columns]
        if not cols:
            frames[name] = frame
            continue
        ok = pl.all_horizontal(
            # Compared both ways, not through abs(): abs(INT64_MIN) wraps to itself.
            [pl.col(c).is_between(-TIME_LIMIT_NS, TIME_LIMIT_NS, closed="none") for c in cols]
        ).fill_null(False)
        bad = frame.select((~ok).sum()).item() if frame.height else 0
        if bad:
            frame = frame.filter(ok)
            dropped += bad
        frames[name] = frame
    if dropped:
        meta.warnings.append(
            f"dropped {dropped} records whose start or end time is missing or beyond ±2^62 ns"
        )
    clean_meta(meta)
    out = Trace(meta=meta, **frames)
    _check_span(out)
    return out


def _check_span(trace: Trace) -> None:
    timed = [f.select("start_ns", "end_ns") for f in (trace.gpu, trace.cpu) if f.height]
    if not timed:
        return
    both = pl.concat(timed)
    first, last = both.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    if last - first <= PLAUSIBLE_SPAN_NS:
        return
    starts = both.get_column("start_ns").sort()
    gaps = starts.diff().fill_null(0)
    at = int(gaps.arg_max() or 0)
    gap = int(gaps[at])
    trace.meta.warnings.append(
        f"the events span {_duration(last - first)}, implausible for one trace (µs mixed with ns, "
        f"or a clock jump?); the largest gap, {_duration(gap)}, separates {at:,} events from "
        f"{starts.len() - at:,}; all of it was analyzed: --time-window START:END selects one side"
    )


def _duration(ns: int) -> str:
    days = ns / 86_400e9
    if days >= 365.25:
        return f"{days / 365.25:,.1f} years"
    if days >= 1:
        return f"{days:,.1f} days"
    return f"{ns / 1e9:,.3f} s"


def clean_text(value: str) -> str:
    """``value`` as valid Unicode: lone surrogates become U+FFFD (UTF-8 cannot hold them)."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_json(value: Any, depth: int = 0) -> Any:
    """A JSON-like value with every text valid Unicode and every number finite and within int64
    (others become None); bytes become text. Deeper than 64 levels: None."""
    if depth > 64:
        return None
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < 1 << 63 else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v, depth + 1) for v in value]
    return clean_text(str(value))


def _text_or_none(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return clean_text(str(value))


def clean_meta(meta: TraceMeta) -> None:
    devices = []
    for dev in meta.devices:
        dev_id = small_int(dev.id)
        if dev_id is None:
            continue
        devices.append(
            Device(
                id=dev_id,
                name=_text_or_none(dev.name),
                sm_count=small_int(dev.sm_count, 0),
                memory_bytes=small_int(dev.memory_bytes, 0, TIME_LIMIT_NS),
                compute_capability=_text_or_none(dev.compute_capability),
                vendor=_text_or_none(dev.vendor),
            )
        )
    if len(devices) < len(meta.devices):
        meta.warnings.append(
            f"ignored {len(meta.devices) - len(devices)} devices whose id is not "
            "a number within int32"
        )
    meta.devices = devices
    meta.profiler = _text_or_none(meta.profiler)
    rank, world = small_int(meta.rank, 0), small_int(meta.world_size, 1)
    meta.rank, meta.world_size = rank if rank is not None else 0, world if world is not None else 1
    base = meta.time_base_ns
    meta.time_base_ns = base if isinstance(base, int) and in_time_range(base) else None
    meta.warnings = [clean_text(str(w)) for w in meta.warnings]
    meta.extra = clean_json(meta.extra)
