"""Helpers for the kernel-rule tests: the committed Nsight Compute pages, as views."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from traceanalyzer.analysis.views import Views
from traceanalyzer.ingest import read_any
from traceanalyzer.rules import RuleConfig
from traceanalyzer.rules.engine import evaluate

NCU = Path(__file__).resolve().parents[2] / "sample_traces" / "ncu"


@functools.cache
def views(name: str) -> Views:
    return Views(read_any(NCU / name))


def outcome(name: str, slug: str, **params: Any) -> tuple[Any, Any]:
    """(finding or None, outcome) of rule ``slug`` on the committed page ``name``."""
    config = RuleConfig(overrides={slug: params} if params else {})
    findings, outcomes = evaluate(views(name), config)
    found = [f for f in findings if f.slug == slug]
    (o,) = [o for o in outcomes if o.slug == slug]
    return (found[0] if found else None), o


def kernels(finding: Any) -> list[str]:
    """The kernels a finding names in its evidence (function names)."""
    return [row["kernel"].split("(")[0] for row in finding.evidence]
