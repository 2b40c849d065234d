"""``traceanalyzer rules``: list and show the rules; ``rule_options`` for commands that run them."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from traceanalyzer.report.terminal import render_rules, safe


def rule_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--rules, --set, --enable, --disable (and ./traceanalyzer.yaml), passed on as
    ``rule_config``: a validated :class:`traceanalyzer.rules.RuleConfig`."""

    @click.option("--rules", "rule_paths", multiple=True,
                  type=click.Path(exists=True, path_type=Path), metavar="DIR_OR_FILE",
                  help="Add rule files (YAML) or folders of them; repeatable.")
    @click.option("--set", "rule_sets", multiple=True, metavar="SLUG.PARAM=VALUE",
                  help="Override a rule parameter, e.g. gpu-idle-gaps.min_gap_us=200; repeatable.")
    @click.option("--enable", "enable_rules", multiple=True, metavar="SLUG",
                  help="Turn on a rule that is off (by default or in the config); repeatable.")
    @click.option("--disable", "disable_rules", multiple=True, metavar="SLUG",
                  help="Turn off a rule; repeatable.")
    @click.option("--config", "project_config", type=click.Path(exists=True, dir_okay=False,
                  path_type=Path), envvar="TRACEANALYZER_CONFIG", show_envvar=True,
                  help="Project config with rule settings [default: ./traceanalyzer.yaml if present].")
    @functools.wraps(func)
    def wrapper(*args: Any, rule_paths: tuple[Path, ...], rule_sets: tuple[str, ...],
                enable_rules: tuple[str, ...], disable_rules: tuple[str, ...],
                project_config: Path | None, **kwargs: Any) -> Any:
        from traceanalyzer.rules import load_config

        config = load_config([str(p) for p in rule_paths], list(rule_sets), project_config,
                             enable=enable_rules, disable=disable_rules)
        return func(*args, rule_config=config, **kwargs)

    return wrapper


def _config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``rule_options`` that change which rules exist (for list/show)."""
    return rule_options(func)


@click.group("rules")
def rules() -> None:
    """List the rules and show their documentation."""


@rules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_config_options
def list_rules(as_json: bool, rule_config: Any) -> None:
    """List the rules: id, slug, severity, on/off, title and parameters (values in effect)."""
    rows = []
    for rule in rule_config.rules():
        rows.append({
            "id": rule.id, "slug": rule.slug, "severity": rule.severity,
            "enabled": rule_config.is_enabled(rule), "title": rule.title,
            "detector": rule.detector, "parameters": _params(rule_config, rule.slug), "path": rule.path,
        })
    if as_json:
        from traceanalyzer.report.textsafe import json_text_safe

        click.echo(json_text_safe(json.dumps(rows, indent=2, ensure_ascii=False)))
        return
    click.echo(render_rules(rows))


@rules.command("show")
@click.argument("slug")
@_config_options
def show_rule(slug: str, rule_config: Any) -> None:
    """Print the documentation of rule SLUG (or its id), with the parameter values in effect."""
    from traceanalyzer.errors import RuleError
    from traceanalyzer.rules.docs import rule_markdown

    for rule in rule_config.rules():
        if slug in (rule.slug, rule.id):
            text = rule_markdown(rule, level=1, examples=False)
            current = _params(rule_config, rule.slug)
            changed = {k: v for k, v in current.items() if v != rule.parameters[k].default}
            if changed:
                text += "\nIn effect: " + ", ".join(f"{k}={v}" for k, v in changed.items()) + "\n"
            text += f"\nRule file: {rule.path}\n"
            click.echo("\n".join(safe(line) for line in text.splitlines()))
            return
    raise RuleError(f"unknown rule {slug!r} (see 'traceanalyzer rules list')")


@rules.command("docs")
def docs() -> None:
    """Print docs/rules.md, generated from the built-in rule files."""
    from traceanalyzer.rules import load_rules
    from traceanalyzer.rules.docs import rules_markdown

    click.echo(rules_markdown(load_rules([])), nl=False)


def _params(config: Any, slug: str) -> dict[str, Any]:
    for rule, params in config.resolved():
        if rule.slug == slug:
            return params
    return {}
