"""Nsight Compute's CSV pages (``ncu --import R --csv --page raw|details``), read directly.

The raw page is a header row of metric names, a row of their units, then one row per profiled
launch; the details page is one row per (launch, section, metric) and one per rule message.
Both begin with the launch's identity (``ID``, ``Process ID``, ``Kernel Name``, ``Stream``,
``Block Size``, ``Grid Size``, ``Device``, ``CC``). Values are written with thousands
separators (``53,548.17``) and in the unit the page states; each is converted to its column's
unit (:func:`.metrics.unit_factor`). Everything here is untrusted: a page that is not one of
these two gives one :class:`~traceanalyzer.errors.InputError`, a value that is not a number is
null.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import re
import zlib
from typing import Any

import polars as pl
import polars.selectors  # noqa: F401 - pl.selectors

from traceanalyzer.errors import InputError
from traceanalyzer.ingest.ncu.metrics import METRICS, TENSOR_OPS, Metric, unit_factor
from traceanalyzer.model import KERNEL_METRICS_SCHEMA

#: The largest CSV page read (decompressed): a raw page holds ~30 kB per profiled launch, so
#: this is some 8,000 launches (profiles are of a few kernels: `ncu -k ... -c N`); the page is
#: parsed in Python, about 10x its size in memory.
MAX_PAGE_BYTES = 256 << 20
#: Values beyond this magnitude are not counts of anything on a GPU: null, not an overflow.
MAX_INT = 1 << 62
IDENTITY = ("ID", "Process ID", "Kernel Name", "Stream", "Block Size", "Grid Size", "Device")
DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
RULE_COLUMNS = (
    "Rule Name",
    "Rule Type",
    "Rule Description",
    "Estimated Speedup Type",
    "Estimated Speedup",
)
#: Columns read to compute others, not kept (the FLOP counters' per-cycle rates, DRAM peak).
_HELPERS = tuple(m.column for m in METRICS if m.column not in KERNEL_METRICS_SCHEMA)
_TRIPLE = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")

RULES_SCHEMA = pl.Schema(
    {
        "id": pl.Int64(),
        "name": pl.String(),
        "section": pl.String(),
        "rule": pl.String(),
        "type": pl.String(),
        "description": pl.String(),
        "speedup_type": pl.String(),
        "speedup_pct": pl.Float64(),
    }
)


def read_text(path: str | os.PathLike[str]) -> str:
    """The page's text, gunzipped when it is gzipped (by content), at most
    :data:`MAX_PAGE_BYTES`."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        opener: Any = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as fh:
            data = fh.read(MAX_PAGE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot be read as an Nsight Compute CSV page ({exc})") from None
    if len(data) > MAX_PAGE_BYTES:
        raise InputError(
            path,
            f"is larger than {MAX_PAGE_BYTES >> 20} MB: not an Nsight "
            "Compute CSV page this tool reads",
        )
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def looks_like_page(head: bytes) -> bool:
    """The first bytes of a CSV page: its header, or the ``==PROF==`` lines ncu may print first
    (the registry's test: :data:`traceanalyzer.ingest.formats.NCU_CSV`)."""
    from traceanalyzer.ingest.formats import NCU_CSV

    assert NCU_CSV.looks_like is not None
    return NCU_CSV.looks_like(head)


def _rows(text: str, path: str | os.PathLike[str]) -> list[list[str]]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(('"ID",', "ID,"))), None)
    if start is None:
        raise InputError(
            path, 'is not an Nsight Compute CSV page: no header row starting with "ID"'
        )
    limit = csv.field_size_limit()
    try:
        csv.field_size_limit(MAX_PAGE_BYTES)  # a rule message can be long; restored below
        rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    except csv.Error as exc:
        raise InputError(path, f"is not a valid CSV page ({exc})") from None
    finally:
        csv.field_size_limit(limit)
    header = rows[0]
    missing = [c for c in IDENTITY if c not in header]
    if missing:
        raise InputError(
            path,
            "is not an Nsight Compute CSV page: no column " + ", ".join(repr(c) for c in missing),
        )
    # A details row without a rule message leaves the rule columns out.
    short_ok = all(c in header for c in DETAILS_COLUMNS)
    for i, row in enumerate(rows[1:], start=start + 2):
        if row and (len(row) > len(header) or (len(row) < len(header) and not short_ok)):
            raise InputError(
                path,
                f"line {i}: {len(row)} fields where the header has "
                f"{len(header)}: a cut or damaged CSV page",
            )
        if short_ok and len(row) < len(header):
            row.extend([""] * (len(header) - len(row)))
    return [r for r in rows if any(r)]


def page_kind(rows: list[list[str]]) -> str:
    """ "details" or "raw"."""
    return "details" if all(c in rows[0] for c in DETAILS_COLUMNS) else "raw"


def number(text: str | None) -> float | None:
    """A value as Nsight Compute writes it (``1,234.5``), or None (empty, ``n/a``, ``nan``)."""
    if text is None:
        return None
    s = text.strip().replace(",", "")
    if not s:
        return None
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _triple(text: str) -> tuple[int | None, int | None, int | None]:
    m = _TRIPLE.match(text.strip())
    if m is None:
        return None, None, None
    x, y, z = (int(g) for g in m.groups())
    return tuple(v if v < 1 << 31 else None for v in (x, y, z))  # type: ignore[return-value]


def _identity(row: dict[str, str]) -> dict[str, Any]:
    from traceanalyzer.demangle import demangle

    name = row["Kernel Name"]
    if name.startswith("_Z"):
        name = demangle(name) or name
    gx, gy, gz = _triple(row["Grid Size"])
    bx, by, bz = _triple(row["Block Size"])
    ident = number(row["ID"])
    pid = number(row["Process ID"])
    stream = number(row["Stream"])
    device = number(row["Device"])
    return {
        "id": int(ident) if ident is not None and abs(ident) < MAX_INT else None,
        "process_id": int(pid) if pid is not None and abs(pid) < MAX_INT else None,
        "device": int(device) if device is not None and 0 <= device < 1 << 31 else None,
        "stream": int(stream) if stream is not None and abs(stream) < MAX_INT else None,
        "name": name,
        "function": function_name(name),
        "compute_capability": row.get("CC"),
        "grid_x": gx,
        "grid_y": gy,
        "grid_z": gz,
        "block_x": bx,
        "block_y": by,
        "block_z": bz,
    }


def function_name(name: str) -> str:
    """A kernel's name without its parameter list, return type or ``void``: what profilers agree
    on (Nsight Compute writes ``f(const float *, int)``, torch.profiler ``f(float const*, int)``).
    The parameter list is the last top-level ``(...)``, outside any ``<...>``."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0:
            cut = i
            break
    base = name[:cut].strip()
    if base.startswith("void "):
        base = base[5:].strip()
    return " ".join(base.split())


def _value(metric: Metric, text: str, unit: str) -> float | None:
    v = number(text)
    if v is None:
        return None
    factor = unit_factor(unit, metric.unit)
    if factor is None:
        return None  # a unit that is not what the metric is: not guessed at
    v *= factor
    if metric.dtype.is_integer():
        return float(round(v)) if abs(v) < MAX_INT else None
    return v


def read_raw(rows: list[list[str]], path: str | os.PathLike[str]) -> pl.DataFrame:
    """``kernel_metrics`` from a raw page's rows (header, units, launches)."""
    header = rows[0]
    if len(rows) < 2:
        raise InputError(path, "is an Nsight Compute raw page without its units row")
    units = rows[1]
    index = {name: i for i, name in enumerate(header)}
    if "gpu__time_duration.sum" not in index:
        raise InputError(
            path,
            "is not an Nsight Compute raw page: no gpu__time_duration.sum "
            "column (export it with `ncu --import R --csv --page raw`)",
        )
    records = []
    for row in rows[2:]:
        named = dict(zip(header, row, strict=True))
        rec = _identity(named)
        for m in METRICS:
            col = next((index[n] for n in m.raw if n in index), None)
            rec[m.column] = None if col is None else _value(m, row[col], units[col])
        tensor = [number(row[index[n]]) for n in TENSOR_OPS if n in index]
        known = [t for t in tensor if t is not None]
        rec["tensor_flop_per_s"] = sum(known) if known else None
        records.append(rec)
    return finish(records)


def read_details(
    rows: list[list[str]], path: str | os.PathLike[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``kernel_metrics`` (the columns the page shows) and the rule messages, from a details
    page's rows. The first value of a metric name in a launch wins (the Speed of Light section
    comes first: its ``Memory Throughput`` is the %, not the later section's bytes/s)."""
    header = rows[0]
    by_name = {m.details: m for m in METRICS if m.details}
    launches: dict[int | None, dict[str, Any]] = {}
    rules: list[dict[str, Any]] = []
    has_rules = all(c in header for c in RULE_COLUMNS)
    for row in rows[1:]:
        named = dict(zip(header, row, strict=True))
        ident = _identity(named)
        rec = launches.setdefault(ident["id"], ident)
        if has_rules and named["Rule Name"]:
            rules.append(
                {
                    "id": ident["id"],
                    "name": ident["name"],
                    "section": named["Section Name"],
                    "rule": named["Rule Name"],
                    "type": named["Rule Type"],
                    "description": named["Rule Description"],
                    "speedup_type": named["Estimated Speedup Type"] or None,
                    "speedup_pct": number(named["Estimated Speedup"]),
                }
            )
            continue
        m = by_name.get(named["Metric Name"])
        if m is not None and rec.get(m.column) is None:
            rec[m.column] = _value(m, named["Metric Value"], named["Metric Unit"])
    frame = finish(list(launches.values()))
    return frame, pl.DataFrame(rules, schema=RULES_SCHEMA, orient="row") if rules else pl.DataFrame(
        schema=RULES_SCHEMA
    )


def finish(records: list[dict[str, Any]]) -> pl.DataFrame:
    """The canonical frame from per-launch records: the columns derived from others (DRAM
    bytes, shared memory, FLOP/s, pipe utilisation, arithmetic intensity, the occupancy
    limiter), then the schema's columns in order, absent ones null."""
    helper_schema = {m.column: m.dtype for m in METRICS}
    schema = {**KERNEL_METRICS_SCHEMA, **{c: helper_schema[c] for c in _HELPERS}}
    frame = pl.DataFrame(
        [{c: r.get(c) for c in schema} for r in records],
        schema={c: (pl.Float64 if dt.is_numeric() else dt) for c, dt in schema.items()},
    )
    frame = frame.with_columns(derived()).with_columns(
        (pl.col("flop_per_s") / pl.col("dram_bytes_per_s")).alias("arithmetic_intensity")
    )
    floats = pl.selectors.float()
    frame = frame.with_columns(pl.when(floats.is_finite()).then(floats))  # x/0: null, not inf
    return frame.select(pl.col(c).cast(dt, strict=False) for c, dt in KERNEL_METRICS_SCHEMA.items())


def derived() -> list[pl.Expr]:
    """Expressions of the derived columns (each defined in docs/canonical-model.md)."""
    c = pl.col
    hz = c("sm_clock_hz")
    fp32 = c("fadd_per_cycle").fill_null(0) + c("fmul_per_cycle").fill_null(0)
    fp64 = c("dadd_per_cycle").fill_null(0) + c("dmul_per_cycle").fill_null(0)
    fp16 = c("hadd_per_cycle").fill_null(0) + c("hmul_per_cycle").fill_null(0)
    ffma, dfma, hfma = (c(f"{p}fma_per_cycle").fill_null(0) for p in "fdh")
    scalar_flops = (fp32 + 2 * ffma + fp64 + 2 * dfma + 2 * (fp16 + 2 * hfma)) * hz
    limits = [
        "block_limit_registers",
        "block_limit_shared_mem",
        "block_limit_warps",
        "block_limit_sm",
        "block_limit_barriers",
    ]
    least = pl.min_horizontal(*limits)
    limiter: Any = pl.when(least.is_null()).then(None)
    for col in limits:
        limiter = limiter.when(c(col) == least).then(pl.lit(col.removeprefix("block_limit_")))
    duration_s = c("duration_ns") / 1e9
    return [
        (c("dram_bytes_read") + c("dram_bytes_write")).alias("dram_bytes"),
        (c("shared_mem_static").fill_null(0) + c("shared_mem_dynamic").fill_null(0)).alias(
            "shared_mem"
        ),
        (scalar_flops + c("tensor_flop_per_s").fill_null(0)).alias("flop_per_s"),
        (100 * (fp32 + ffma) / c("ffma_peak_per_cycle")).alias("fp32_pipe_pct"),
        (100 * (fp64 + dfma) / c("dfma_peak_per_cycle")).alias("fp64_pipe_pct"),
        (100 * (fp16 + hfma) / c("hfma_peak_per_cycle")).alias("fp16_pipe_pct"),
        (c("dram_peak_bytes_per_cycle") * c("dram_clock_hz")).alias("dram_peak_bytes_per_s"),
        ((c("dram_bytes_read") + c("dram_bytes_write")) / duration_s).alias("dram_bytes_per_s"),
        pl.when(c("global_load_bytes_per_sector") > 0)
        .then(100 * c("global_load_bytes_per_sector") / 32)
        .alias("global_load_efficiency_pct"),
        pl.when(c("global_store_bytes_per_sector") > 0)
        .then(100 * c("global_store_bytes_per_sector") / 32)
        .alias("global_store_efficiency_pct"),
        (c("global_load_sectors") / c("global_load_requests")).alias(
            "global_load_sectors_per_request"
        ),
        (c("global_store_sectors") / c("global_store_requests")).alias(
            "global_store_sectors_per_request"
        ),
        ((c("local_load_sectors").fill_null(0) + c("local_store_sectors").fill_null(0)) * 32).alias(
            "local_bytes"
        ),
        limiter.alias("occupancy_limiter"),
    ]
