"""The rule engine: run each active rule on a trace's views and turn detections into findings.

The engine owns everything users read: severity, the message filled from measured fields,
impact in time and % of the GPU's active span, per-step impact, evidence rows and the fix. Detectors and
queries only measure. A rule that cannot judge the input says so (``not_applicable`` with the
reason) instead of staying silent; a rule that crashes is an ``error`` of the tool, never a
verdict on the trace (``TRACEANALYZER_DEBUG=1`` lets the exception through instead).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.analysis import intervals
from traceanalyzer.analysis.timings import step
from traceanalyzer.errors import RuleError
from traceanalyzer.findings import Finding, RuleOutcome, severity_of, severity_rank
from traceanalyzer.model import shapes_hint
from traceanalyzer.rules.detectors import Detection, NotApplicable, get_detector
from traceanalyzer.rules.detectors._common import (
    NS_PER_MS,
    analyzed_device,
    source_line,
    step_count,
    window_length,
)
from traceanalyzer.rules.loader import RuleConfig
from traceanalyzer.rules.query import TABLES, run_query
from traceanalyzer.rules.schema import DEFAULT_REASONS, ENGINE_FIELDS, Rule, render, template_fields

if TYPE_CHECKING:
    from traceanalyzer.analysis.views import Views
    from traceanalyzer.model import Device

_MAX_TEXT = 400


# --- load-time checks -------------------------------------------------------------------------


def check_rule(rule: Rule) -> None:
    """Cross-check a parsed rule against its detector or query. Raises :class:`RuleError`."""

    def where(key: str) -> str:
        return f"{rule.path}: rule {rule.slug!r}: field {key!r}"

    for req in rule.requires:
        frame = req.need.split(".", 1)[0]
        if frame not in TABLES:
            raise RuleError(f"{where('requires')}: unknown frame {frame!r} "
                            f"(known: {', '.join(TABLES)})")
    allowed = set(ENGINE_FIELDS) | set(rule.parameters)
    if rule.detector is not None:
        spec = get_detector(rule.detector)
        if spec is None:
            from traceanalyzer.rules.detectors import all_detectors

            raise RuleError(f"{where('detector')}: unknown detector {rule.detector!r} "
                            f"(known: {', '.join(sorted(all_detectors()))})")
        if set(rule.parameters) != set(spec.params):
            missing = sorted(set(spec.params) - set(rule.parameters))
            extra = sorted(set(rule.parameters) - set(spec.params))
            detail = "; ".join(
                part for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"unknown {', '.join(extra)}" if extra else "",
                ) if part
            )
            raise RuleError(f"{where('parameters')}: do not match detector "
                            f"{rule.detector!r} ({detail})")
        allowed |= set(spec.fields)
    else:
        assert rule.query is not None
        result = run_query(rule.query, rule.defaults(), _empty_tables(), where("query"),
                           eager=False)
        schema = result.collect_schema()
        allowed |= _query_field_names(schema)
    quiet_allowed = set(rule.parameters) | {"step_count", "window_ms"}
    templates = [("message", rule.message, allowed), ("quiet", rule.quiet, quiet_allowed)]
    templates += [(f"devices[{i}].message", v.message, allowed)
                  for i, v in enumerate(rule.variants) if v.message]
    for key, template, names in templates:
        for name in template_fields(template, where(key)):
            if name not in names:
                raise RuleError(f"{where(key)}: template field {{{name}}} is not a measured "
                                "field or parameter of this rule")


@functools.lru_cache(maxsize=1)
def _empty_tables() -> dict[str, pl.DataFrame]:
    """Empty versions of every table, with their real schemas, to plan queries against."""
    from traceanalyzer.model import FRAME_SCHEMAS, TraceMeta, empty_trace

    trace = empty_trace(TraceMeta(path="<empty>", source_format="none"))
    tables: dict[str, pl.DataFrame] = {name: trace.frames()[name] for name in FRAME_SCHEMAS}
    try:
        from traceanalyzer.analysis.views import Views

        views = Views(trace)
        for name in TABLES:
            try:
                tables[name] = getattr(views, name)
            except Exception:  # noqa: BLE001 - a view that cannot be built empty is skipped
                continue
    except ImportError:
        pass
    return tables


def _query_field_names(schema: pl.Schema) -> set[str]:
    names = {"count"}
    for col, dtype in schema.items():
        names.add(f"top_{col}")
        if dtype.is_numeric():
            names.update({f"sum_{col}", f"max_{col}"})
    return names


# --- evaluation -------------------------------------------------------------------------------


def evaluate(
    views: Views, config: RuleConfig | None = None
) -> tuple[list[Finding], list[RuleOutcome]]:
    """Run every active rule on each rank of ``views`` that ran GPU work (a file may hold
    several: an Nsight Systems export of one process per GPU), the headline rank first;
    findings (each naming its rank) sorted by impact, plus one outcome per rule (see
    :class:`~traceanalyzer.findings.RuleOutcome` for what each status means): the headline
    rank's, or the first other rank's where only that one fired."""
    findings, outcomes = _evaluate_rank(views, config)
    headline = views.metrics.rank
    for rank in judged_ranks(views):
        if rank == headline:
            continue
        theirs, their_outcomes = _evaluate_rank(views.for_rank(rank), config)
        findings += theirs
        fired = {o.slug: o for o in their_outcomes if o.status == "fired"}
        outcomes = [o if o.status == "fired" or o.slug not in fired
                    else replace(fired[o.slug], reason=f"rank {rank}: {fired[o.slug].reason}")
                    for o in outcomes]
    findings.sort(key=lambda f: (-f.impact_ns, -severity_rank(f.severity), f.rule_id,
                                 f.rank != headline, f.rank or 0))
    return findings, outcomes


#: The most ranks of one file the rules judge (each pass costs ~40 ms of fixed work, and an
#: export of hundreds of processes is a server's, not a training job's): the headline and the
#: ranks with the most GPU busy time; the reports say how many were left out.
MAX_JUDGED_RANKS = 64


def gpu_ranks(views: Views) -> list[int]:
    """Every rank with GPU activity in the trace."""
    ranks = views.gpu["rank"].drop_nulls().unique().to_list() if views.gpu.height else []
    return sorted(int(r) for r in ranks)


def judged_ranks(views: Views) -> list[int]:
    """The ranks the rules judge: the headline and every rank with GPU activity, up to
    :data:`MAX_JUDGED_RANKS` (those with the most GPU busy time)."""
    headline = views.metrics.rank
    others = [r for r in gpu_ranks(views) if r != headline]
    if len(others) >= MAX_JUDGED_RANKS:
        by_rank = views.metrics_by_rank
        others = sorted(others, key=lambda r: (-(by_rank[r].busy_ns if r in by_rank else 0), r))
        others = others[: MAX_JUDGED_RANKS - 1]
    return sorted({headline, *others})


def _evaluate_rank(
    views: Views, config: RuleConfig | None = None
) -> tuple[list[Finding], list[RuleOutcome]]:
    """Every active rule on the headline rank of ``views``."""
    config = config or RuleConfig()
    findings: list[Finding] = []
    outcomes: list[RuleOutcome] = []
    window = window_length(views)
    steps = step_count(views)
    device = analyzed_device(views)
    for rule, params in config.active():
        with step(rule.slug, "rule"):
            finding, outcome = _run_rule(rule, params, views, window, steps,
                                         config.max_evidence, device)
        outcomes.append(outcome)
        if finding is not None:
            findings.append(finding)
    findings.sort(key=lambda f: (-f.impact_ns, -severity_rank(f.severity), f.rule_id))
    _point_only_at_findings(findings, outcomes)
    return findings, outcomes


#: "see <rule slug>" in a message: a pointer to another finding.
_SEE_RULE = re.compile(r"\b([Ss])ee ([a-z0-9]+(?:-[a-z0-9]+)+)\b")
_NOT_FIRED = {"quiet": "rule {} stays under its threshold here",
              "not_applicable": "rule {} does not apply to this trace",
              "error": "rule {} could not run"}


def _point_only_at_findings(findings: list[Finding], outcomes: list[RuleOutcome]) -> None:
    """A message that says "see <rule>" where that rule did not fire says so instead: a
    pointer to a finding the report does not hold sends the reader looking for nothing."""
    status = {o.slug: o.status for o in outcomes}

    def fix(text: str) -> str:
        def repl(m: re.Match[str]) -> str:
            slug = m.group(2)
            if status.get(slug, "fired") == "fired":
                return m.group(0)
            return _NOT_FIRED.get(status[slug], "rule {} did not fire").format(slug)
        return _SEE_RULE.sub(repl, text)

    for f in findings:
        f.message = fix(f.message)
    for o in outcomes:
        if o.status == "fired":
            o.reason = fix(o.reason)


def _run_rule(
    rule: Rule, params: dict[str, int | float], views: Views, window: int, steps: int,
    max_evidence: int, device: Device | None = None,
) -> tuple[Finding | None, RuleOutcome]:
    """One rule on ``views``: its finding (message and fix chosen for ``device``, the analyzed
    GPU, from the rule file's ``devices:`` variants) and its outcome."""
    missing = missing_requirement(rule, views)
    if missing is not None:
        return None, RuleOutcome(rule.slug, rule.id, "not_applicable", _for_format(missing, views))
    try:
        detection = _detect(rule, params, views, window)
    except NotApplicable as exc:
        return None, RuleOutcome(rule.slug, rule.id, "not_applicable",
                                 _for_format(str(exc), views))
    except RuleError:
        raise
    except Exception as exc:  # noqa: BLE001 - one broken rule must not sink the whole report
        if os.environ.get("TRACEANALYZER_DEBUG"):
            raise
        return None, RuleOutcome(rule.slug, rule.id, "error", error_reason(exc))
    base = {**params, "step_count": steps, "window_ms": window / NS_PER_MS}
    if detection is None:
        quiet = render(rule.quiet, base, f"{rule.path}: rule {rule.slug!r}: field 'quiet'")
        return None, RuleOutcome(rule.slug, rule.id, "quiet", quiet)
    impact = int(min(max(detection.impact_ns, 0), window)) if window else 0
    impact_pct = 100.0 * impact / window if window else 0.0
    per_step = impact // steps if steps else None
    values = {
        **base,
        **detection.fields,
        "impact_ms": impact / NS_PER_MS,
        "impact_pct": impact_pct,
        "per_step_ms": per_step / NS_PER_MS if per_step is not None else None,
    }
    message = render(rule.message_for(device), values,
                     f"{rule.path}: rule {rule.slug!r}: field 'message'")
    finding = Finding(
        slug=rule.slug,
        rule_id=rule.id,
        severity=severity_of(rule.severity, impact_pct),
        title=rule.title,
        message=message,
        fix=rule.fix_for(device),
        impact_ns=impact,
        impact_pct=impact_pct,
        impact_per_step_ns=per_step,
        rank=_rank(views),
        evidence=evidence_rows(detection.evidence, max_evidence),
        references=list(rule.references),
    )
    # The whole evidence, for the what-if models (analysis.whatif); not stored.
    finding.evidence_frame = detection.evidence  # type: ignore[attr-defined]
    return finding, RuleOutcome(rule.slug, rule.id, "fired", message)


def error_reason(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def _detect(rule: Rule, params: dict[str, int | float], views: Views, window: int) -> Detection | None:
    if rule.detector is not None:
        spec = get_detector(rule.detector)
        assert spec is not None  # checked at load
        return spec.func(views, params)
    assert rule.query is not None
    tables = _LazyTables(views)
    where = f"{rule.path}: rule {rule.slug!r}: field 'query'"
    rows = run_query(rule.query, params, tables, where)
    assert isinstance(rows, pl.DataFrame)
    return query_detection(rows)


class _LazyTables(dict[str, pl.DataFrame]):
    """Tables by name, fetched from the views only when a query names them."""

    def __init__(self, views: Views) -> None:
        super().__init__()
        self._views = views

    def __contains__(self, name: object) -> bool:
        return name in TABLES and hasattr(self._views, str(name))

    def __getitem__(self, name: str) -> pl.DataFrame:
        frame: pl.DataFrame = getattr(self._views, name)
        return frame


def query_detection(rows: pl.DataFrame) -> Detection | None:
    """Turn a query's rows into a detection: fires on one row or more."""
    if rows.height == 0:
        return None
    if "impact_ns" in rows.columns:
        rows = rows.sort("impact_ns", descending=True, nulls_last=True)
        impact = int(rows["impact_ns"].fill_null(0).sum())
    elif {"start_ns", "end_ns"} <= set(rows.columns):
        impact = intervals.union_length(rows.select("start_ns", "end_ns").drop_nulls())
    else:
        impact = 0
    fields: dict[str, Any] = {"count": rows.height}
    top = rows.row(0, named=True)
    for col, dtype in rows.schema.items():
        fields[f"top_{col}"] = top[col]
        if dtype.is_numeric():
            fields[f"sum_{col}"] = rows[col].sum()
            fields[f"max_{col}"] = rows[col].max()
    return Detection(impact_ns=impact, fields=fields, evidence=rows)


#: What a frame holds, for a reason that says it holds nothing in the window.
_FRAME_NOUNS = {"cpu": "CPU operators or runtime calls", "gpu": "GPU activity"}


def missing_requirement(rule: Rule, views: Views) -> str | None:
    """The reason a rule cannot run on ``views``, or None.

    A requirement the whole trace cannot meet (a CPU-only trace has no GPU activity at all)
    comes before one only the window misses (its CPU events lie outside it): "--window all"
    would not make the rule run then. A column required of an empty frame is missing because
    the frame is: a trace with no GPU activity is said to have none, not to lack grid sizes.
    """
    in_window: str | None = None
    for req in rule.requires:
        frame_name, _, column = req.need.partition(".")
        frame = getattr(views, frame_name, None)
        if frame is None or not isinstance(frame, pl.DataFrame) or frame.height == 0:
            outside = _empty_in_window(frame_name, views)
            if outside is None:
                return (DEFAULT_REASONS.get(frame_name, req.reason) if column and frame_name
                        in _FRAME_NOUNS else req.reason)
            in_window = in_window or outside
            continue
        if column:
            if column not in frame.columns or frame[column].null_count() == frame.height:
                return req.reason
    return in_window


#: The advice a reason gives for missing shapes, written for torch.profiler traces.
_SHAPES_ADVICE = "(profile with record_shapes=True)"


def _for_format(reason: str, views: Views) -> str:
    """A not-applicable reason in words that hold for the trace's format: recording shapes is
    advice for a torch.profiler trace, not for an Nsight Systems one (model.shapes_hint)."""
    source = getattr(getattr(views, "meta", None), "source_format", None)
    if _SHAPES_ADVICE in reason and source not in (None, "kineto"):
        return reason.replace(_SHAPES_ADVICE, f"({shapes_hint(source)})")
    return reason


def _empty_in_window(frame_name: str, views: Views) -> str | None:
    """Where a frame is empty only in the window (the capture holds rows of it outside), the
    reason says so: "the trace has no CPU activity" would not hold for the trace. The CPU rows
    outside are told apart: framework operators, runtime/driver calls."""
    trace = getattr(views, "trace", None)
    window = getattr(getattr(trace, "meta", None), "extra", {}).get("window")
    captured = window.get("captured_rows", {}) if isinstance(window, dict) else {}
    rows = captured.get(frame_name, 0)
    noun = _FRAME_NOUNS.get(frame_name)
    if not rows or noun is None:
        return None
    what = f"{rows:,}"
    if frame_name == "cpu" and "cpu_api" in captured:
        api = captured["cpu_api"]
        ops = rows - api
        parts = [f"{ops:,} operator{'' if ops == 1 else 's'}" if ops else "no operators",
                 f"{api:,} runtime call{'' if api == 1 else 's'}" if api else "no runtime calls"]
        what = f"{rows:,} CPU event{'' if rows == 1 else 's'} ({', '.join(parts)})"
    return (f"the analyzed window holds no {noun}: the capture's {what} "
            f"{'lies' if rows == 1 else 'lie'} outside it; --window all analyzes them")


def _rank(views: Views) -> int | None:
    trace = getattr(views, "trace", None)
    meta = getattr(trace, "meta", None)
    return getattr(meta, "rank", None)


def evidence_rows(evidence: pl.DataFrame | None, limit: int) -> list[dict[str, Any]]:
    """The top rows of a detector's evidence as flat JSON-able dicts.

    A recorded Python stack becomes ``source``: the innermost frame that is user code.
    """
    if evidence is None or evidence.height == 0 or limit <= 0:
        return []
    top = evidence.head(limit)
    if "call_stack" in top.columns:
        from_stack = source_line(pl.col("call_stack"))
        if "source" in top.columns:
            from_stack = pl.coalesce("source", from_stack)
        top = top.with_columns(from_stack.alias("source")).drop("call_stack")
    casts = []
    for col, dtype in top.schema.items():
        if isinstance(dtype, (pl.Enum, pl.Categorical)):
            casts.append(pl.col(col).cast(pl.String))
        elif dtype.is_float():
            casts.append(pl.col(col).round(3))
        elif dtype == pl.String:
            casts.append(pl.col(col).str.slice(0, _MAX_TEXT))
        elif isinstance(dtype, (pl.List, pl.Struct, pl.Array)):
            casts.append(pl.col(col).cast(pl.String, strict=False))
    if casts:
        top = top.with_columns(casts)
    return top.to_dicts()
