"""``--json``: the analysis as a stable, versioned JSON document (see docs/json-schema.md).

The output is deterministic: the same result gives byte-identical JSON. Keys come in a fixed
order (dicts of unknown shape, such as evidence rows, are key-sorted), rows are sorted, floats are
rounded to :data:`FLOAT_DIGITS` decimals, NaN and infinity become null, and nothing records "now".
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import polars as pl

from traceanalyzer import __version__
from traceanalyzer.analysis.result import AnalysisResult
from traceanalyzer.analysis.window import WINDOW_KINDS
from traceanalyzer.findings import OUTCOME_STATUSES, SHARE_BASE, Finding
from traceanalyzer.model import TraceMeta
from traceanalyzer.report._common import pct_of, sorted_findings, write_text_atomic

#: Bumped only for changes that break readers (a field removed, renamed or retyped).
#: Adding a field is not a break and keeps the version.
SCHEMA_VERSION = 1
FLOAT_DIGITS = 3

# Row order for each frame: first columns that exist are used, most significant first.
_FRAME_ORDER: dict[str, list[tuple[str, bool]]] = {
    "steps": [("start_ns", False), ("step", False)],
    "kernels": [("total_ns", True), ("name", False), ("category", False)],
    "categories": [("total_ns", True), ("category", False)],
    "operators": [("gpu_ns", True), ("name", False)],
    "streams": [("device", False), ("stream", False)],
    "utilization": [("bucket_start_ns", False)],
    "ranks": [("rank", False)],
    "memory": [("rank", False), ("device", False)],
    "memory_holders": [("rank", False), ("device", False), ("bytes", True)],
    "kernel_metrics": [("id", False)],
}


def clean(value: Any) -> Any:
    """A JSON-safe, deterministic copy of ``value``."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        r = round(value, FLOAT_DIGITS)
        return 0.0 if r == 0 else r  # no "-0.0"
    if isinstance(value, dict):
        return {str(k): clean(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return clean(value.item())
    return str(value)


def frame_rows(frame: pl.DataFrame | None, name: str) -> list[dict[str, Any]]:
    if frame is None or frame.is_empty():
        return []
    keys = [(c, d) for c, d in _FRAME_ORDER.get(name, []) if c in frame.columns]
    if keys:
        frame = frame.sort([c for c, _ in keys], descending=[d for _, d in keys],
                           nulls_last=True, maintain_order=True)
    casts = [pl.col(c).cast(pl.String) for c, t in frame.schema.items()
             if isinstance(t, (pl.Enum, pl.Categorical))]
    if casts:
        frame = frame.with_columns(casts)
    return [{k: clean(v) for k, v in row.items()} for row in frame.to_dicts()]


def metrics_dict(result: AnalysisResult) -> dict[str, Any]:
    m = result.metrics
    out = {k: clean(v) for k, v in m.to_dict().items()}
    span = m.span_ns
    # Shares of the GPU's active span, so readers need not re-derive them (and all agree on how).
    out["idle_pct"] = clean(pct_of(m.idle_ns, span))
    out["idle_host_wait_pct"] = clean(pct_of(m.idle_host_wait_ns, span))
    out["idle_kernel_wait_pct"] = clean(pct_of(m.idle_kernel_wait_ns, span))
    out["idle_other_pct"] = clean(pct_of(m.idle_other_ns, span))
    out["compute_pct"] = clean(pct_of(m.compute_ns, span))
    out["communication_pct"] = clean(pct_of(m.communication_ns, span))
    out["exposed_communication_pct"] = clean(pct_of(m.exposed_communication_ns, span))
    out["exposed_transfer_pct"] = clean(pct_of(m.exposed_transfer_ns, span))
    out["memory_pct"] = clean(pct_of(m.memory_ns, span))
    out.update(perf_metrics_dict(result))
    return out


def perf_metrics_dict(result: AnalysisResult) -> dict[str, Any]:
    """The performance model's metrics (flops_per_step, achieved_tflops, mfu_pct, ...)."""
    from traceanalyzer.perfmodel import metrics_of

    return {k: clean(v) for k, v in metrics_of(result).items()}


#: Columns of the JSON ``roofline`` rows, in order.
ROOFLINE_COLUMNS = ("name", "input_dims", "input_types", "op_class", "precision", "kernels",
                    "time_ns", "model_flops", "flops", "bytes", "intensity", "achieved_tflops", "achieved_gbps",
                    "roof_tflops", "bound", "roofline_pct", "lost_ns", "reachable_pct",
                    "reachable_lost_ns")


def roofline_dict(result: AnalysisResult, top: int = 50) -> dict[str, Any]:
    """The roofline per operator signature and per kernel, most time lost first."""
    from traceanalyzer.perfmodel import kernel_roofline, op_roofline, roofline_of

    roof = roofline_of(result)

    def rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
        keep = [c for c in ROOFLINE_COLUMNS if c in frame.columns]
        return [{k: clean(v) for k, v in row.items()} for row in frame.head(top).select(keep).to_dicts()]

    return {"device": roof.device, "peak_name": roof.peaks.name if roof.peaks else None,
            "bandwidth_gbps": clean(roof.bandwidth_gbps),
            "reachable_gbps": clean(roof.reachable_gbps),
            "trace_flops": _trace_flops(result), "ridge_bf16": clean(roof.ridge("bf16")),
            "operators": rows(op_roofline(result)), "kernels": rows(kernel_roofline(result))}


def _trace_flops(result: AnalysisResult) -> dict[str, Any] | None:
    check = (result.perf_summary or {}).get("trace_flops") or {}
    by_op = check.get("by_op")
    return {op: {k: clean(v) for k, v in row.items()} for op, row in by_op.items()} if by_op else None


def finding_dict(f: Finding) -> dict[str, Any]:
    return {
        "slug": f.slug,
        "id": f.rule_id,
        "severity": f.severity,
        "title": f.title,
        "message": f.message,
        "impact": {
            "ns": clean(int(f.impact_ns or 0)),
            "pct": clean(f.impact_pct),
            "pct_of": SHARE_BASE,
            "per_step_ns": clean(f.impact_per_step_ns),
        },
        "rank": f.rank,
        "fix": f.fix,
        "evidence": [clean(dict(row)) for row in f.evidence],
        "references": [str(r) for r in f.references],
        "what_if": clean(f.what_if),
    }


def trace_dict(result: AnalysisResult) -> dict[str, Any]:
    return meta_dict(result.meta)


def meta_dict(meta: TraceMeta) -> dict[str, Any]:
    return {
        "path": meta.path,
        "format": meta.source_format,
        "profiler": meta.profiler,
        "rank": meta.rank,
        "world_size": meta.world_size,
        "time_base_ns": meta.time_base_ns,
        "devices": [clean(dict(vars(d))) for d in sorted(meta.devices, key=lambda d: d.id)],
        "warnings": [str(w) for w in meta.warnings],
        "extra": clean(dict(meta.extra)),
    }


def to_json_dict(result: AnalysisResult) -> dict[str, Any]:
    """The JSON document for ``result`` as plain Python objects (see :data:`JSON_SCHEMA`)."""
    outcomes = sorted(result.rule_outcomes, key=lambda o: (o.rule_id, o.slug))
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceanalyzer", "version": __version__},
        "trace": trace_dict(result),
        "metrics": metrics_dict(result),
        "window": result.window.to_dict() if result.window is not None else None,
        "findings": [finding_dict(f) for f in sorted_findings(result.findings)],
        "notes": result.notes(),
        "rule_outcomes": [
            {"slug": o.slug, "id": o.rule_id, "status": o.status, "reason": o.reason}
            for o in outcomes
        ],
        "steps": steps_rows(result),
        "what_if": what_if_dict(result),
        "critical_path_by_rank": critical_path_by_rank(result),
        "kernels": frame_rows(result.kernels, "kernels"),
        "categories": frame_rows(result.categories, "categories"),
        "operators": frame_rows(result.operators, "operators"),
        "streams": frame_rows(result.streams, "streams"),
        "utilization": frame_rows(result.utilization, "utilization"),
        "ranks": frame_rows(result.ranks, "ranks") if result.ranks is not None else None,
        "roofline": roofline_dict(result),
        **memory_dict(result),
        # Nsight Compute's profiled launches with their verdicts (analysis.ncu.kernel_table)
        "kernel_metrics": frame_rows(result.kernel_verdicts, "kernel_metrics"),
    }


def what_if_dict(result: AnalysisResult) -> dict[str, Any] | None:
    """The what-if summary (analysis.whatif.predict) with ``ranking``: the findings in the
    order the reports' what-if table ranks them, each with both figures (report/whatif_view.py)."""
    if result.what_if is None:
        return None
    from traceanalyzer.report.whatif_view import ranking_dict

    return clean({**result.what_if, "ranking": ranking_dict(result)})


def steps_rows(result: AnalysisResult) -> list[dict[str, Any]]:
    """The steps, each with its rank's critical path's breakdown (``critical_path``:
    ``<category>_ns`` adding up to the step) and the path's time on each GPU of the rank
    (``critical_path_gpus``: [{device, path_ns}]); docs/critical-path.md."""
    rows = frame_rows(result.steps, "steps")
    rank = result.metrics.rank
    paths = result.critical_path_ranks
    if paths is None and result.critical_path is not None:  # an entry of an older layout
        paths = result.critical_path.with_columns(rank=pl.lit(rank, pl.Int32))
    by_step: dict[Any, dict[str, Any]] = {}
    if paths is not None and not paths.is_empty():
        cats = [c for c in paths.columns if c.endswith("_ns")
                and c not in ("start_ns", "end_ns", "duration_ns")]
        by_step = {(r["rank"], r["step"]): {c: clean(r[c]) for c in cats}
                   for r in paths.iter_rows(named=True)}
    gpus: dict[Any, list[dict[str, Any]]] = {}
    if result.critical_path_gpus is not None:
        for r in result.critical_path_gpus.iter_rows(named=True):
            gpus.setdefault((r["rank"], r["step"]), []).append(
                {"device": r["device"], "path_ns": clean(r["path_ns"])})
    for row in rows:
        key = (row.get("rank", rank), row.get("step"))
        row["critical_path"] = by_step.get(key)
        row["critical_path_gpus"] = gpus.get(key, []) if key in by_step else None
    return rows


def critical_path_by_rank(result: AnalysisResult) -> list[dict[str, Any]]:
    """Per rank: steps, mean step time, the mean per step of each kind of its critical path,
    the kind it is bound by and the path's mean time per step on each GPU (analysis.path_ranks)."""
    from traceanalyzer.analysis.path_ranks import per_rank

    if result.critical_path_ranks is None:
        return []
    return frame_rows(per_rank(result.critical_path_ranks, result.critical_path_gpus), "ranks")


def memory_dict(result: AnalysisResult) -> dict[str, Any]:
    """Device memory (analysis.memory): per device, and the operators holding it at the peak."""
    return {
        "memory": frame_rows(result.memory, "memory"),
        "memory_holders": frame_rows(result.memory_holders, "memory_holders"),
    }


def dumps(doc: dict[str, Any]) -> str:
    """The report's JSON text: valid for any name (lone surrogates become U+FFFD) and safe to
    ``cat`` (C1 and bidi controls as ``\\u`` escapes; :func:`.textsafe.json_text_safe`)."""
    from traceanalyzer.report.textsafe import json_text_safe

    return json_text_safe(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)) + "\n"


def render_json(result: AnalysisResult) -> str:
    return dumps(to_json_dict(result))


def write_json(result: AnalysisResult, path: str | os.PathLike[str]) -> None:
    """Write ``result`` as JSON to ``path`` (atomically)."""
    write_text_atomic(path, render_json(result))


# -- schema -------------------------------------------------------------------------------------
# A JSON Schema (draft 2020-12 subset) of the document. docs/json-schema.md describes each field;
# tests validate real output against it with :func:`validate`, which needs no extra package.

_NUM = {"type": ["number", "null"]}
_INT = {"type": ["integer", "null"]}
_STR = {"type": ["string", "null"]}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required}


def _rows(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "array", "items": _obj(props, required)}


_METRIC_INTS = ["rank", "span_ns", "busy_ns", "idle_ns", "idle_host_wait_ns",
                "idle_kernel_wait_ns", "idle_other_ns", "compute_ns", "communication_ns",
                "memory_ns", "exposed_communication_ns", "kernel_count", "memcpy_count",
                "memset_count", "step_count"]
_METRIC_NUMS = ["window_start_ns", "window_end_ns", "comm_overlap_pct", "kernels_per_step",
                "step_time_mean_ns", "step_time_p50_ns", "step_time_p95_ns",
                "launch_delay_mean_ns", "launch_delay_p50_ns", "launch_delay_p95_ns",
                "launch_overhead_pct", "busy_pct", "idle_pct", "idle_host_wait_pct",
                "idle_kernel_wait_pct", "idle_other_pct", "compute_pct", "communication_pct",
                "exposed_communication_pct", "memory_pct", "peak_memory_allocated_bytes",
                "peak_memory_reserved_bytes", "flops_per_step", "achieved_tflops",
                "mfu_pct", "peak_tflops", "tokens_per_s", "trace_flops_ratio",
                "exposed_transfer_ns", "comm_wait_ns", "exposed_transfer_pct"]

JSON_SCHEMA: dict[str, Any] = _obj(
    {
        "schema_version": {"type": "integer", "const": SCHEMA_VERSION},
        "tool": _obj({"name": {"type": "string"}, "version": {"type": "string"}}),
        "trace": _obj({
            "path": {"type": "string"},
            "format": {"type": "string"},
            "profiler": _STR,
            "rank": {"type": "integer"},
            "world_size": {"type": "integer"},
            "time_base_ns": _INT,
            "devices": _rows({"id": {"type": "integer"}, "name": _STR, "sm_count": _INT,
                              "memory_bytes": _INT, "compute_capability": _STR,
                              "vendor": _STR}, ["id"]),
            "warnings": {"type": "array", "items": {"type": "string"}},
            "extra": {"type": "object"},
        }),
        "metrics": _obj({**{k: {"type": "integer"} for k in _METRIC_INTS},
                         **{k: _NUM for k in _METRIC_NUMS},
                         "window_kind": {"type": "string", "enum": list(WINDOW_KINDS)},
                         "exposed_transfer_basis": {"type": ["string", "null"],
                                                    "enum": ["ranks", "steps", "none", None]},
                         "peak_name": _STR, "flops_source": _STR, "mfu_reason": _STR,
                         "trace_flops_calls": _INT}),
        "window": {"type": ["object", "null"]},
        "notes": {"type": "array", "items": {"type": "string"}},
        "findings": _rows({
            "slug": {"type": "string"},
            "id": {"type": "string"},
            "severity": {"type": "string", "enum": ["info", "low", "medium", "high", "critical"]},
            "title": {"type": "string"},
            "message": {"type": "string"},
            "impact": _obj({"ns": {"type": "integer"}, "pct": _NUM, "pct_of": {"type": "string"},
                            "per_step_ns": _INT}),
            "rank": _INT,
            "fix": {"type": "string"},
            "evidence": {"type": "array", "items": {"type": "object"}},
            "references": {"type": "array", "items": {"type": "string"}},
            "what_if": {"type": ["object", "null"]},
        }, ["slug", "id", "severity", "message", "impact", "evidence"]),
        "rule_outcomes": _rows({
            "slug": {"type": "string"}, "id": {"type": "string"},
            "status": {"type": "string", "enum": list(OUTCOME_STATUSES)},
            "reason": {"type": "string"},
        }, ["slug", "id", "status", "reason"]),
        "steps": _rows({"step": _INT, "name": _STR, "start_ns": {"type": "integer"},
                        "end_ns": {"type": "integer"}, "duration_ns": {"type": "integer"},
                        "launch_count": {"type": "integer"}, "outlier": {"type": "boolean"},
                        "critical_path": {"type": ["object", "null"]},
                        "critical_path_gpus": {"type": ["array", "null"]}},
                       ["start_ns", "end_ns", "duration_ns"]),
        "what_if": {"type": ["object", "null"]},
        "critical_path_by_rank": {"type": "array", "items": {"type": "object"}},
        "kernels": _rows({"name": {"type": "string"}, "category": {"type": "string"},
                          "instances": {"type": "integer"}, "total_ns": {"type": "integer"},
                          "mean_ns": _NUM, "pct_gpu_time": _NUM},
                         ["name", "category", "instances", "total_ns"]),
        "categories": _rows({"category": {"type": "string"}, "total_ns": {"type": "integer"},
                             "pct_gpu_time": _NUM}, ["category", "total_ns"]),
        "operators": _rows({"name": {"type": "string"}, "gpu_ns": {"type": "integer"}},
                           ["name", "gpu_ns"]),
        "streams": _rows({"device": _INT, "stream": _INT}, ["device", "stream"]),
        "utilization": _rows({"bucket_start_ns": {"type": "integer"},
                              "bucket_end_ns": {"type": "integer"}, "busy_pct": _NUM},
                             ["bucket_start_ns", "bucket_end_ns", "busy_pct"]),
        "ranks": {"type": ["array", "null"], "items": {"type": "object"}},
        "memory": _rows({"rank": {"type": "integer"}, "device": {"type": "integer"},
                         "source": {"type": "string"}, "peak_allocated_bytes": _INT,
                         "peak_allocated_ns": _INT, "peak_allocated_step": _INT,
                         "peak_allocated_pct": _NUM, "peak_reserved_bytes": _INT,
                         "peak_reserved_ns": _INT, "peak_reserved_step": _INT,
                         "peak_reserved_pct": _NUM, "capacity_bytes": _INT,
                         "events": {"type": "integer"}},
                        ["rank", "device", "source", "peak_allocated_bytes",
                         "peak_reserved_bytes"]),
        "memory_holders": _rows({"rank": {"type": "integer"}, "device": {"type": "integer"},
                                 "operator": {"type": "string"}, "bytes": {"type": "integer"},
                                 "allocations": _INT, "pct_of_peak": _NUM},
                                ["rank", "device", "operator", "bytes"]),
        "roofline": _obj({"device": _STR, "peak_name": _STR, "bandwidth_gbps": _NUM,
                          "reachable_gbps": _NUM, "ridge_bf16": _NUM,
                          "trace_flops": {"type": ["object", "null"]},
                          "operators": _rows({"name": {"type": "string"}, "time_ns": _NUM,
                                              "roofline_pct": _NUM, "lost_ns": _NUM},
                                             ["name", "time_ns", "lost_ns"]),
                          "kernels": _rows({"name": {"type": "string"}, "time_ns": _NUM,
                                            "roofline_pct": _NUM, "lost_ns": _NUM},
                                           ["name", "time_ns", "lost_ns"])}),
        "kernel_metrics": _rows({"kernel": {"type": "string"}, "grid": {"type": "string"},
                                 "block": {"type": "string"}, "ncu_ns": _INT,
                                 "timeline_ns": _INT, "bound": _STR, "roofline_pct": _NUM,
                                 "near_roofline": {"type": "boolean"},
                                 "verdict": {"type": "string"}, "findings": {"type": "string"}},
                                ["kernel", "grid", "block", "verdict", "findings"]),
    }
)

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "integer": (int,),
    "number": (int, float), "boolean": (bool,), "null": (type(None),),
}


def validate(doc: Any, schema: dict[str, Any] = JSON_SCHEMA, where: str = "$") -> list[str]:
    """Problems of ``doc`` against ``schema`` (the subset :data:`JSON_SCHEMA` uses); [] if valid."""
    problems: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        ok = any(isinstance(doc, _PY_TYPES[t]) and not (isinstance(doc, bool) and t != "boolean")
                 for t in names)
        if not ok:
            return [f"{where}: expected {'/'.join(names)}, got {type(doc).__name__}"]
    if "const" in schema and doc != schema["const"]:
        problems.append(f"{where}: expected {schema['const']!r}, got {doc!r}")
    if "enum" in schema and doc not in schema["enum"]:
        problems.append(f"{where}: {doc!r} not one of {schema['enum']}")
    if isinstance(doc, dict):
        for key in schema.get("required", []):
            if key not in doc:
                problems.append(f"{where}: missing {key!r}")
        for key, sub in schema.get("properties", {}).items():
            if key in doc:
                problems += validate(doc[key], sub, f"{where}.{key}")
    if isinstance(doc, list) and "items" in schema:
        for i, item in enumerate(doc):
            problems += validate(item, schema["items"], f"{where}[{i}]")
    return problems
