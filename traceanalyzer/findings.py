"""Findings: what a rule reports, measured, with its evidence and its fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Severities from least to most severe; ``--fail-on`` compares by this order.
SEVERITIES: tuple[str, ...] = ("info", "low", "medium", "high", "critical")

#: What every finding's share (``impact_pct``) and every rule's "%" threshold divides by: the
#: GPU's active span, from its first activity in the analysis window to its last (the
#: headline's "GPU span", docs/metrics.md), not the window, which can be much longer (a
#: whole-process capture without steps). Every report labels the share with these words.
SHARE_BASE = "the GPU's active span"
SHARE_LABEL = f"of {SHARE_BASE}"


#: Said under two findings or more: GPU idle while data loaded counts in gpu-idle-gaps and in
#: dataloader-stall, and a slow FP32 GEMM in fp32-matmul and odd-matmul-shape.
IMPACTS_OVERLAP = ("Impacts overlap where one stretch of time has several causes, so they do not "
                   "add up.")

#: Said under the findings of a torch.profiler trace recorded with Python stacks in which the GPU
#: often waited for the CPU: collecting stacks (and shapes) slows every operator on the CPU side.
#: On the held-out Llama training step (sample_traces/holdout) the GPU waited for the CPU 52% of
#: the window under torch.profiler with stacks and shapes, 2% under Nsight Systems.
PROFILER_OVERHEAD = (
    "This trace was recorded by torch.profiler with with_stack=True{shapes}, which slows every "
    "operator on the CPU side: the GPU waited for the CPU {host_wait:.0f}% of its active span here, "
    "and that share, with the findings that rest on it, can be much smaller without the "
    "profiler. Confirm CPU-bound findings with a trace recorded without stacks, or with Nsight "
    "Systems."
)
#: The GPU's wait for the CPU from which the note above is said, in % of its active span.
PROFILER_OVERHEAD_MIN_HOST_WAIT_PCT = 10.0


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


#: The least share of the GPU's active span (SHARE_BASE) a finding's impact must reach for each
#: severity. A finding's severity follows its impact: a problem that costs 40% of it is critical, one
#: that costs a tenth of it high, 3% medium, less than that low (docs/rules.md says the same).
SEVERITY_MIN_IMPACT_PCT: dict[str, float] = {"critical": 40.0, "high": 10.0, "medium": 3.0,
                                             "low": 0.0}


def impact_severity(impact_pct: float) -> str:
    """The severity a measured impact (in % of the GPU's active span) earns."""
    return next(s for s, least in SEVERITY_MIN_IMPACT_PCT.items() if impact_pct >= least)


def severity_of(rule_severity: str, impact_pct: float) -> str:
    """A finding's severity: what its measured impact earns (:func:`impact_severity`), at most
    its rule's ``severity``.

    Every built-in rule declares ``critical`` (a test checks it), so for them severity is the
    impact alone: a GPU idle half its active span is critical whichever rule says so, and a
    problem costing 0.5% of it is low. A rule file of one's own may declare less to keep its
    findings below a level (``--fail-on``); an ``info`` rule's findings stay ``info``.
    """
    if rule_severity == "info":
        return rule_severity
    return min(rule_severity, impact_severity(impact_pct), key=severity_rank)


def failing(findings: list[Finding], fail_on: str) -> list[Finding]:
    """The findings at or above ``fail_on``, the ones that make ``--fail-on`` exit 1."""
    least = severity_rank(fail_on)
    return [f for f in findings if severity_rank(f.severity) >= least]


def fail_on_reason(findings: list[Finding], fail_on: str, where: str = "") -> list[str]:
    """One line per finding that makes ``--fail-on`` fail, for stderr: which rule, its
    severity and impact, and where (``where``: the trace, for a command given several)."""
    prefix = f"{where}: " if where else ""
    return [f"{prefix}{f.slug} ({f.rule_id}) is {f.severity}, at or above --fail-on {fail_on}: "
            f"impact {f.impact_pct:.1f}% {SHARE_LABEL}"
            + (f" (rank {f.rank})" if f.rank is not None else "")
            for f in failing(findings, fail_on)]


@dataclass
class Finding:
    """One problem found in one trace (or one rank of a job)."""

    slug: str  # stable rule slug, e.g. "gpu-idle-gaps"
    rule_id: str  # stable short id, e.g. "TA001"
    severity: str
    title: str
    message: str  # one line, with measured numbers
    fix: str
    impact_ns: int  # estimated time lost over the analyzed window
    impact_pct: float  # impact_ns as % of the GPU's active span (SHARE_BASE)
    impact_per_step_ns: int | None = None  # when the trace has steps
    rank: int | None = None
    #: Top occurrences, most costly first. Each row is a flat dict of JSON-able values; rows that
    #: have a place on the timeline carry ``start_ns`` and ``end_ns`` (and ``stream`` if any).
    evidence: list[dict[str, Any]] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    #: The step time predicted with the problem fixed (analysis.whatif): ``step_time_ns``,
    #: ``saving_ns`` (the step time now minus it) and ``assumes`` (what the prediction takes
    #: the fix to do); the times are null where the rule has no model. None before prediction.
    what_if: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: What a rule can have done on a trace. ``error`` is the tool's failure, not a verdict.
OUTCOME_STATUSES = ("fired", "quiet", "not_applicable", "error")


@dataclass
class RuleOutcome:
    """What one rule did on one trace: fired, stayed quiet, could not judge it (the trace lacks
    what the rule needs), or failed with an error (a bug in traceanalyzer: no verdict)."""

    slug: str
    rule_id: str
    status: str  # one of OUTCOME_STATUSES
    #: fired: the message; quiet: the rule's quiet text; not_applicable: what the input lacks;
    #: error: the exception in one line.
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
