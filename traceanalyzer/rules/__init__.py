"""Rules: YAML rule files, their engine and the built-in detectors.

``evaluate(views, config)`` runs the active rules on a trace's derived views;
``load_config(...)`` builds a :class:`RuleConfig` from ``--rules``, ``--set``, ``--enable``,
``--disable`` and a ``traceanalyzer.yaml`` project config; ``builtin_rule_files()`` lists the
built-in rules. See docs/rules.md and docs/adding-a-rule.md.
"""

from __future__ import annotations

from traceanalyzer.rules.engine import evaluate
from traceanalyzer.rules.loader import (
    RuleConfig,
    builtin_rule_files,
    builtin_rules_dir,
    builtin_slugs,
    load_config,
    load_rules,
)
from traceanalyzer.rules.schema import Parameter, Rule

__all__ = [
    "Parameter",
    "Rule",
    "RuleConfig",
    "builtin_rule_files",
    "builtin_rules_dir",
    "builtin_slugs",
    "evaluate",
    "load_config",
    "load_rules",
]
