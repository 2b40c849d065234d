"""Finding rule files and resolving a run's rule configuration.

Built-in rules live in the repository's top-level ``rules/`` folder; the wheel ships them as
``traceanalyzer/_rules`` (pyproject ``force-include``). Users add rule files with ``--rules
DIR_OR_FILE`` or a ``traceanalyzer.yaml`` project config, tune parameters with ``--set
slug.param=value`` and switch rules on or off with ``--enable`` / ``--disable``.

Precedence, lowest first: the rule file's defaults, the project config, the command line.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from traceanalyzer.errors import RuleError
from traceanalyzer.rules.schema import Rule, load_rule_file, safe_load

PROJECT_CONFIG_NAME = "traceanalyzer.yaml"
RULE_SUFFIXES = (".yaml", ".yml")


def builtin_rules_dir() -> Path:
    """The folder of built-in rule files: ``traceanalyzer/_rules`` in a wheel, else ``rules/``."""
    try:
        packaged = importlib.resources.files("traceanalyzer") / "_rules"
        if packaged.is_dir():
            return Path(str(packaged))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - zipped installs
        pass
    return Path(__file__).resolve().parents[2] / "rules"


def builtin_rule_files() -> list[Path]:
    """The built-in rule files, one per rule, each named after its rule's slug: the one list of
    the built-in rules that everything else (tests, docs, manifests) derives from."""
    return rule_files(builtin_rules_dir())


def builtin_slugs() -> list[str]:
    """The slugs of the built-in rules, in file order (read from the files, not checked)."""
    return [load_rule_file(path).slug for path in builtin_rule_files()]


def rule_files(path: Path) -> list[Path]:
    """Rule files at ``path``: the file itself, or the ``*.yaml``/``*.yml`` files of a folder."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in RULE_SUFFIXES and p.is_file())
    if path.is_file():
        return [path]
    raise RuleError(f"{path}: no such rule file or folder")


def load_rules(paths: Iterable[Path], *, include_builtin: bool = True) -> list[Rule]:
    """Load and cross-check rules. A user rule with a built-in slug replaces the built-in one."""
    from traceanalyzer.rules.engine import check_rule  # engine knows detectors and SQL tables

    by_slug: dict[str, Rule] = {}
    sources: list[list[Path]] = []
    if include_builtin:
        sources.append(builtin_rule_files())
    for path in paths:
        sources.append(rule_files(Path(path)))
    for files in sources:
        seen_here: dict[str, str] = {}
        for file in files:
            rule = load_rule_file(file)
            if rule.slug in seen_here:
                raise RuleError(f"{file}: rule {rule.slug!r}: field 'slug': also defined in "
                                f"{seen_here[rule.slug]}")
            seen_here[rule.slug] = str(file)
            check_rule(rule)
            by_slug[rule.slug] = rule
    ids: dict[str, str] = {}
    for rule in by_slug.values():
        if rule.id in ids:
            raise RuleError(f"{rule.path}: rule {rule.slug!r}: field 'id': {rule.id} is already "
                            f"used by rule {ids[rule.id]!r}")
        ids[rule.id] = rule.slug
    return sorted(by_slug.values(), key=lambda r: r.id)


@dataclass
class RuleConfig:
    """Which rules run and with which parameters.

    ``overrides`` maps a slug to parameter values, e.g. ``{"gpu-idle-gaps": {"min_gap_us": 200}}``;
    values may be text (from ``--set``) and are validated against the rule's parameter.
    """

    rule_paths: list[Path] = field(default_factory=list)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    enabled: set[str] = field(default_factory=set)
    disabled: set[str] = field(default_factory=set)
    include_builtin: bool = True
    #: Evidence rows kept per finding.
    max_evidence: int = 10
    _resolved: list[tuple[Rule, dict[str, int | float]]] | None = field(
        default=None, repr=False, compare=False
    )

    def rules(self) -> list[Rule]:
        """All loaded rules, enabled or not."""
        return [rule for rule, _ in self._resolve()]

    def resolved(self) -> list[tuple[Rule, dict[str, int | float]]]:
        """Every loaded rule (enabled or not) with its parameters in effect."""
        return list(self._resolve())

    def active(self) -> list[tuple[Rule, dict[str, int | float]]]:
        """The rules to run, each with its resolved parameters. Raises :class:`RuleError`."""
        return [(r, p) for r, p in self._resolve() if self.is_enabled(r)]

    def is_enabled(self, rule: Rule) -> bool:
        if rule.slug in self.disabled:
            return False
        return rule.enabled or rule.slug in self.enabled

    def _resolve(self) -> list[tuple[Rule, dict[str, int | float]]]:
        if self._resolved is None:
            rules = load_rules(self.rule_paths, include_builtin=self.include_builtin)
            known = {r.slug: r for r in rules}
            for slug in sorted((self.enabled | self.disabled | set(self.overrides)) - set(known)):
                raise RuleError(f"unknown rule {slug!r} (see 'traceanalyzer rules list')")
            both = self.enabled & self.disabled
            if both:
                raise RuleError(f"rule {sorted(both)[0]!r} is both enabled and disabled")
            resolved = []
            for rule in rules:
                params = rule.defaults()
                for name, value in self.overrides.get(rule.slug, {}).items():
                    if name not in rule.parameters:
                        choices = ", ".join(rule.parameters) or "none"
                        raise RuleError(f"rule {rule.slug!r} has no parameter {name!r} "
                                        f"(parameters: {choices})")
                    params[name] = rule.parameters[name].coerce(
                        value, where=f"{rule.path}: rule {rule.slug!r}: --set {rule.slug}.{name}"
                    )
                resolved.append((rule, params))
            self._resolved = resolved
        return self._resolved


def parse_set(items: Iterable[str]) -> dict[str, dict[str, str]]:
    """Parse ``slug.param=value`` items (from ``--set``) into overrides."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        slug, dot, param = key.strip().rpartition(".")
        if not sep or not dot or not slug or not param or not value.strip():
            raise RuleError(f"--set {item!r}: expected SLUG.PARAMETER=VALUE, "
                            "e.g. gpu-idle-gaps.min_gap_us=200")
        out.setdefault(slug, {})[param] = value.strip()
    return out


def read_project_config(path: Path) -> dict[str, Any]:
    """Read the rule settings of a ``traceanalyzer.yaml``: rules, enable, disable, parameters.

    Other top-level keys belong to other parts of the tool and are left alone.
    """
    try:
        data = safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RuleError(f"{path}: cannot read config ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # its str() holds the whole file: say where, not what
        raise RuleError(f"{path}: the config is not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise RuleError(f"{path}: invalid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:  # empty, or only comments: no settings
        data = {}
    if not isinstance(data, dict):
        raise RuleError(f"{path}: the config must be a mapping of keys")
    out: dict[str, Any] = {}
    for key in ("rules", "enable", "disable"):
        value = data.get(key) or []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RuleError(f"{path}: field {key!r}: must be a list of text")
        out[key] = value
    params = data.get("parameters") or {}
    if not isinstance(params, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in params.items()
    ):
        raise RuleError(f"{path}: field 'parameters': must map a rule slug to "
                        "{parameter: value}")
    out["parameters"] = params
    # Rule paths in a config are relative to the config file, not to the working directory.
    out["rules"] = [str(path.parent / p) if not Path(p).is_absolute() else p for p in out["rules"]]
    return out


def load_config(
    rules_paths: Iterable[str] = (),
    sets: Iterable[str] = (),
    project_config: Path | None = None,
    *,
    enable: Iterable[str] = (),
    disable: Iterable[str] = (),
    use_project_config: bool = True,
) -> RuleConfig:
    """Build and validate a :class:`RuleConfig` from command-line values and a project config.

    ``project_config`` None means: use ``./traceanalyzer.yaml`` if it exists (unless
    ``use_project_config`` is false). Errors surface here, before any trace is read.
    """
    config = RuleConfig()
    if project_config is None and use_project_config:
        candidate = Path.cwd() / PROJECT_CONFIG_NAME
        project_config = candidate if candidate.is_file() else None
    if project_config is not None:
        project = read_project_config(Path(project_config))
        config.rule_paths.extend(Path(p) for p in project["rules"])
        config.enabled.update(project["enable"])
        config.disabled.update(project["disable"])
        for slug, values in project["parameters"].items():
            config.overrides.setdefault(slug, {}).update(values)
    config.rule_paths.extend(Path(p) for p in rules_paths)
    for slug, values in parse_set(sets).items():
        config.overrides.setdefault(slug, {}).update(values)
    # The command line wins over the config file when they disagree.
    enable, disable = set(enable), set(disable)
    config.disabled -= enable
    config.enabled -= disable
    config.enabled |= enable
    config.disabled |= disable
    config.active()  # validate now: a bad rule or --set fails before any trace is read
    return config
