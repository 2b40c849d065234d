"""Rule files: their schema, validation and safe message templates.

One rule per YAML file, flat keys (the semgrep / ruff model)::

    slug: gpu-idle-gaps            # stable, part of the interface
    id: TA001
    severity: medium               # info | low | medium | high | critical
    title: GPU idle between kernels
    message: "GPU idle {idle_pct:.1f}% of the GPU's active span ..."   # named measured fields only
    quiet: "No GPU idle gap of {min_gap_us} µs or more."     # text when nothing is found
    rationale: ...
    fix: ...
    references: [https://...]
    parameters:
      min_gap_us: {default: 100, unit: us, description: ...}
    requires: [gpu]                # or {need: cpu.input_dims, reason: "..."}
    devices:                       # message or fix for some devices (first match wins)
      - when: {vendor: nvidia, compute_capability_below: "8.0"}
        fix: ...
    examples: {fires: [...], silent: [...]}
    detector: idle_gaps            # a registered Python detector, or:
    query: "SELECT ... FROM gpu WHERE ... > :min_gap_us"    # Polars SQL over the views

Text from a rule is never evaluated: YAML is read with a safe loader (:data:`SAFE_LOADER`), templates allow only
plain ``{name}`` / ``{name:.1f}`` fields, and SQL parameters are bound as validated numbers.
"""

from __future__ import annotations

import functools
import math
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from traceanalyzer.devices import VENDORS, DeviceCondition, parse_capability
from traceanalyzer.errors import RuleError
from traceanalyzer.findings import SEVERITIES

if TYPE_CHECKING:
    from traceanalyzer.model import Device

SLUG_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
ID_RE = re.compile(r"^[A-Z]{2,8}[0-9]{3,4}$")
PARAM_RE = re.compile(r"^[a-z][a-z0-9_]*$")
#: A parameter's name ends with its unit, so a threshold is never read in the wrong unit.
UNITS: dict[str, str] = {
    "ns": "ns",
    "us": "µs",
    "ms": "ms",
    "s": "s",
    "pct": "%",
    "count": "count",
    "bytes": "bytes",
    "ratio": "ratio",
}
_FORMAT_SPEC_RE = re.compile(r"^(?:[<>^=]?[+ -]?\d{0,3},?(?:\.\d{1,2})?[dfegs%]?)$")
#: Names the engine fills for every rule, in addition to a detector's own fields and parameters.
ENGINE_FIELDS: tuple[str, ...] = ("impact_ms", "impact_pct", "per_step_ms", "step_count", "window_ms")

REQUIRED_KEYS = ("slug", "id", "severity", "title", "message", "quiet", "rationale", "fix")
OPTIONAL_KEYS = (
    "references", "parameters", "requires", "examples", "detector", "query", "enabled",
    "devices",
)
#: The keys of one ``devices:`` variant, and of its ``when:`` condition.
VARIANT_KEYS = ("when", "message", "fix")
WHEN_KEYS = ("vendor", "compute_capability_at_least", "compute_capability_below")
PARAM_KEYS = {"default", "unit", "description", "min", "max"}
TEXT_KEYS = ("title", "message", "quiet", "rationale", "fix")


@dataclass(frozen=True)
class Parameter:
    name: str
    default: int | float
    unit: str
    description: str
    minimum: float | None = None
    maximum: float | None = None

    @property
    def kind(self) -> type:
        return int if isinstance(self.default, int) else float

    def coerce(self, value: Any, *, where: str) -> int | float:
        """Validate ``value`` for this parameter (strings from ``--set`` are parsed as numbers)."""
        if isinstance(value, str):
            text = value.strip()
            try:
                value = int(text) if self.kind is int else float(text)
            except ValueError:
                raise RuleError(f"{where}: {self.name} must be {_kind_word(self.kind)}, "
                                f"got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RuleError(f"{where}: {self.name} must be {_kind_word(self.kind)}, got {value!r}")
        if self.kind is int:
            if isinstance(value, float):
                if not value.is_integer():
                    raise RuleError(f"{where}: {self.name} must be an integer, got {value!r}")
                value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise RuleError(f"{where}: {self.name} must be a finite number, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise RuleError(f"{where}: {self.name} must be >= {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise RuleError(f"{where}: {self.name} must be <= {self.maximum}, got {value}")
        return value


def _kind_word(kind: type) -> str:
    return "an integer" if kind is int else "a number"


@dataclass(frozen=True)
class Requirement:
    need: str  # "frame" or "frame.column"
    reason: str


@dataclass(frozen=True)
class Variant:
    """A message or fix for the devices ``when`` names, in place of the rule's own."""

    when: DeviceCondition
    message: str | None = None
    fix: str | None = None


@dataclass(frozen=True)
class Rule:
    slug: str
    id: str
    severity: str
    title: str
    message: str
    quiet: str
    rationale: str
    fix: str
    path: str
    references: tuple[str, ...] = ()
    parameters: dict[str, Parameter] = field(default_factory=dict)
    requires: tuple[Requirement, ...] = ()
    examples_fire: tuple[str, ...] = ()
    examples_silent: tuple[str, ...] = ()
    detector: str | None = None
    query: str | None = None
    enabled: bool = True
    #: Messages and fixes for some devices (the first variant that matches and has one wins).
    variants: tuple[Variant, ...] = ()

    def defaults(self) -> dict[str, int | float]:
        return {name: p.default for name, p in self.parameters.items()}

    def message_for(self, device: Device | None) -> str:
        """The message template for ``device``: its variant's, else the rule's own."""
        return next((v.message for v in self.variants if v.message and v.when.matches(device)),
                    self.message)

    def fix_for(self, device: Device | None) -> str:
        """The fix for ``device``: its variant's, else the rule's own (which must hold on any
        device, saying where it differs)."""
        return next((v.fix for v in self.variants if v.fix and v.when.matches(device)), self.fix)


#: Default reasons for common requirements, in the words a user understands.
DEFAULT_REASONS: dict[str, str] = {
    "gpu": "the trace has no GPU activity",
    "cpu": "the trace records no CPU operators or runtime calls",
    "launches": "no GPU activity could be linked to the CPU call that launched it",
    "steps": "the trace marks no steps (ProfilerStep#N)",
    "cpu.input_dims": "input shapes were not recorded (profile with record_shapes=True)",
    "cpu.input_types": "input dtypes were not recorded (profile with record_shapes=True)",
    "cpu.call_stack": "Python stacks were not recorded (profile with with_stack=True)",
    "gpu.grid_x": "kernel grid sizes were not recorded",
    "gpu.src_kind": "the memory kinds of copies were not recorded",
    "gpu.external_id": "GPU activity is not linked to framework operators",
}


#: Names a rule file's field in an error message: ``where("parameters")``.
_Where = Callable[[str | None], str]


def _where(path: str, slug: str | None, key: str | None = None) -> str:
    out = f"{path}: rule {slug!r}" if slug else f"{path}"
    return f"{out}: field {key!r}" if key else out


def load_rule_file(path: Path) -> Rule:
    """Read and validate one rule file. Raises :class:`RuleError` naming file, rule and field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError(f"{path}: cannot read rule file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # its str() holds the whole file: say where, not what
        raise RuleError(f"{path}: the rule file is not UTF-8 text (byte {exc.start})") from None
    return _parse_rule_text(text, str(path))


#: libyaml's safe loader where PyYAML was built with it (its wheels are), else the Python one:
#: the same safe subset of YAML (no Python tags), parsed about ten times faster.
SAFE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


#: Nodes a YAML document may hold once its aliases are expanded. A rule file or a
#: ``traceanalyzer.yaml`` holds a few hundred; an alias bomb (a "billion laughs": anchors that
#: each repeat the one before, 584 bytes) holds billions, and building them took 7.7-15 GB.
MAX_YAML_NODES = 100_000
#: Bytes of YAML text read at all (a rule file is a few KB).
MAX_YAML_BYTES = 4 << 20


class YamlTooBig(yaml.YAMLError):
    """A YAML document whose aliases expand past :data:`MAX_YAML_NODES`, or too long a text."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def expanded_nodes(text: str) -> int:
    """Nodes of ``text``'s documents with every alias expanded, counted from the parser's events
    (which never expand an alias: linear in the text). Stops counting past
    :data:`MAX_YAML_NODES` with :class:`YamlTooBig`."""
    total = 0
    stack: list[list[Any]] = []  # [anchor, nodes so far] of each open collection
    sizes: dict[str, int] = {}
    for event in yaml.parse(text, Loader=SAFE_LOADER):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([event.anchor, 1])
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, size = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, sizes.get(event.anchor, 1)
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        if stack:
            stack[-1][1] += size
        else:
            total += size
        if size > MAX_YAML_NODES or total > MAX_YAML_NODES:
            raise YamlTooBig(f"its aliases expand to more than {MAX_YAML_NODES:,} nodes "
                             "(an alias bomb?)")
    return total


def safe_load(text: str) -> Any:
    """``yaml.safe_load``, with libyaml's parser when there is one, refusing (with
    :class:`YamlTooBig`, a ``YAMLError``) a text over :data:`MAX_YAML_BYTES` or whose aliases
    expand past :data:`MAX_YAML_NODES` nodes before anything is built."""
    if len(text) > MAX_YAML_BYTES:
        raise YamlTooBig(f"is {len(text):,} characters long, more than {MAX_YAML_BYTES:,}")
    if "*" in text:  # an alias: count what it expands to before building it
        expanded_nodes(text)
    return yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader, C or Python


@functools.lru_cache(maxsize=256)
def _parse_rule_text(text: str, path: str) -> Rule:
    # Memoized on the file's text, since every report (the HTML lists the rules) and every trace
    # of a batch loads the rules again. Rules are frozen, so sharing one is safe; a changed file
    # has other text and is parsed again.
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RuleError(f"{path}: invalid YAML{where}: {problem}") from None
    return parse_rule(data, str(path))


def parse_rule(data: Any, path: str) -> Rule:
    """Validate a parsed rule document (a mapping) into a :class:`Rule`."""
    if not isinstance(data, dict):
        raise RuleError(f"{path}: a rule file must be a mapping of keys (one rule per file)")
    slug = data.get("slug")
    if not isinstance(slug, str) or not SLUG_RE.match(slug):
        raise RuleError(f"{_where(path, None, 'slug')}: required, lowercase words joined by "
                        f"'-' (got {slug!r})")

    def where(key: str | None = None) -> str:
        return _where(path, slug, key)

    unknown = sorted(set(data) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise RuleError(f"{where(unknown[0])}: unknown field (allowed: "
                        f"{', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
    for key in REQUIRED_KEYS:
        if key not in data or data[key] is None:
            raise RuleError(f"{where(key)}: required field is missing")
        if not isinstance(data[key], str) or not data[key].strip():
            raise RuleError(f"{where(key)}: must be non-empty text")
    if not ID_RE.match(data["id"]):
        raise RuleError(f"{where('id')}: must look like TA001 (capitals then digits), "
                        f"got {data['id']!r}")
    if data["severity"] not in SEVERITIES:
        raise RuleError(f"{where('severity')}: must be one of {', '.join(SEVERITIES)}, "
                        f"got {data['severity']!r}")
    has_detector, has_query = "detector" in data, "query" in data
    if has_detector == has_query:
        raise RuleError(f"{where('detector')}: a rule needs exactly one of 'detector' or 'query'")
    detector = data.get("detector")
    query = data.get("query")
    if has_detector and (not isinstance(detector, str) or not detector.strip()):
        raise RuleError(f"{where('detector')}: must be the name of a built-in detector")
    if has_query and (not isinstance(query, str) or not query.strip()):
        raise RuleError(f"{where('query')}: must be SQL text")

    references = data.get("references") or []
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise RuleError(f"{where('references')}: must be a list of text")

    parameters = _parse_parameters(data.get("parameters") or {}, where)
    requires = _parse_requires(data.get("requires") or [], where)
    fires, silent = _parse_examples(data.get("examples") or {}, where)
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise RuleError(f"{where('enabled')}: must be true or false")

    for key in ("message", "quiet"):
        check_template(data[key], where(key))
    if "\n" in data["message"].strip() or "\n" in data["title"].strip():
        raise RuleError(f"{where('message')}: message and title must be one line")
    variants = _parse_variants(data.get("devices") or [], where)

    return Rule(
        slug=slug,
        id=data["id"],
        severity=data["severity"],
        title=data["title"].strip(),
        message=data["message"].strip(),
        quiet=data["quiet"].strip(),
        rationale=data["rationale"].strip(),
        fix=data["fix"].strip(),
        path=path,
        references=tuple(references),
        parameters=parameters,
        requires=requires,
        examples_fire=fires,
        examples_silent=silent,
        detector=detector.strip() if has_detector else None,
        query=query if has_query else None,
        enabled=enabled,
        variants=variants,
    )


def _parse_parameters(raw: Any, where: _Where) -> dict[str, Parameter]:
    if not isinstance(raw, dict):
        raise RuleError(f"{where('parameters')}: must be a mapping of name to "
                        "{default, unit, description}")
    out: dict[str, Parameter] = {}
    for name, spec in raw.items():
        w = where(f"parameters.{name}")
        if not isinstance(name, str) or not PARAM_RE.match(name):
            raise RuleError(f"{w}: parameter names are lowercase_with_underscores")
        if not isinstance(spec, dict):
            raise RuleError(f"{w}: must be a mapping with default, unit and description")
        extra = sorted(set(spec) - PARAM_KEYS)
        if extra:
            raise RuleError(f"{w}: unknown key {extra[0]!r} (allowed: {', '.join(sorted(PARAM_KEYS))})")
        for key in ("default", "unit", "description"):
            if key not in spec:
                raise RuleError(f"{w}: missing {key!r}")
        default = spec["default"]
        if isinstance(default, bool) or not isinstance(default, (int, float)):
            raise RuleError(f"{w}: default must be a number, got {default!r}")
        if isinstance(default, float) and not math.isfinite(default):
            raise RuleError(f"{w}: default must be finite")
        unit = spec["unit"]
        if not isinstance(unit, str) or unit not in UNITS:  # a list or mapping is unhashable
            raise RuleError(f"{w}: unit must be one of {', '.join(UNITS)}, got {unit!r}")
        if not name.endswith("_" + unit):
            raise RuleError(f"{w}: the name must end with its unit, '_{unit}'")
        if not isinstance(spec["description"], str) or not spec["description"].strip():
            raise RuleError(f"{w}: description must be non-empty text")
        bounds = []
        for key in ("min", "max"):
            value = spec.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise RuleError(f"{w}: {key} must be a number")
            bounds.append(value)
        param = Parameter(name, default, unit, spec["description"].strip(), bounds[0], bounds[1])
        param.coerce(default, where=w)  # the default must satisfy its own bounds
        out[name] = param
    return out


def _parse_requires(raw: Any, where: _Where) -> tuple[Requirement, ...]:
    if not isinstance(raw, list):
        raise RuleError(f"{where('requires')}: must be a list of 'frame' or 'frame.column' "
                        "(or {need, reason} mappings)")
    out = []
    for item in raw:
        if isinstance(item, str):
            need, reason = item, None
        elif isinstance(item, dict) and isinstance(item.get("need"), str):
            need, reason = item["need"], item.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise RuleError(f"{where('requires')}: reason must be text")
        else:
            raise RuleError(f"{where('requires')}: entries are 'frame', 'frame.column' or "
                            f"{{need, reason}}, got {item!r}")
        if not re.match(r"^[a-z_]+(\.[a-z_0-9]+)?$", need):
            raise RuleError(f"{where('requires')}: {need!r} is not 'frame' or 'frame.column'")
        out.append(Requirement(need, reason or DEFAULT_REASONS.get(need, f"{need} was not recorded")))
    return tuple(out)


def _parse_variants(raw: Any, where: _Where) -> tuple[Variant, ...]:
    shape = "a list of {when: {...}, message: ..., fix: ...}"
    if not isinstance(raw, list):
        raise RuleError(f"{where('devices')}: must be {shape}")
    out = []
    for i, item in enumerate(raw):
        key = f"devices[{i}]"
        if not isinstance(item, dict) or set(item) - set(VARIANT_KEYS):
            raise RuleError(f"{where(key)}: must be a mapping of {', '.join(VARIANT_KEYS)}")
        when = _parse_when(item.get("when"), key, where)
        texts: dict[str, str | None] = {}
        for name in ("message", "fix"):
            text = item.get(name)
            if text is not None and (not isinstance(text, str) or not text.strip()):
                raise RuleError(f"{where(f'{key}.{name}')}: must be non-empty text")
            texts[name] = text.strip() if text else None
        if not texts["message"] and not texts["fix"]:
            raise RuleError(f"{where(key)}: needs a message or a fix")
        if texts["message"]:
            check_template(texts["message"], where(f"{key}.message"))
            if "\n" in texts["message"]:
                raise RuleError(f"{where(f'{key}.message')}: must be one line")
        out.append(Variant(when, texts["message"], texts["fix"]))
    return tuple(out)


def _parse_when(raw: Any, variant: str, where: _Where) -> DeviceCondition:
    key = f"{variant}.when"
    w = where(key)
    if not isinstance(raw, dict) or not raw or set(raw) - set(WHEN_KEYS):
        raise RuleError(f"{w}: must be a mapping of one or more of {', '.join(WHEN_KEYS)}")
    vendor = raw.get("vendor")
    if vendor is not None and vendor not in VENDORS:
        raise RuleError(f"{where(key + '.vendor')}: must be one of {', '.join(VENDORS)}, "
                        f"got {vendor!r}")
    caps = {}
    for name in ("compute_capability_at_least", "compute_capability_below"):
        value = raw.get(name)
        if value is None:
            continue
        cap = parse_capability(value) if not isinstance(value, bool) else None
        if cap is None:
            raise RuleError(f"{where(f'{variant}.when.{name}')}: must be a compute capability "
                            f"such as \"8.0\", got {value!r}")
        caps[name] = cap
    if vendor == "amd" and caps:
        raise RuleError(f"{w}: compute capabilities are NVIDIA's; an AMD condition cannot use them")
    low, high = caps.get("compute_capability_at_least"), caps.get("compute_capability_below")
    if low and high and low >= high:
        raise RuleError(f"{w}: compute_capability_at_least must be below compute_capability_below")
    return DeviceCondition(vendor, low, high)


def _parse_examples(raw: Any, where: _Where) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not isinstance(raw, dict) or set(raw) - {"fires", "silent"}:
        raise RuleError(f"{where('examples')}: must be a mapping with 'fires' and/or 'silent' lists")
    lists = []
    for key in ("fires", "silent"):
        items = raw.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise RuleError(f"{where('examples.' + key)}: must be a list of trace paths")
        lists.append(tuple(items))
    return lists[0], lists[1]


# --- message templates ------------------------------------------------------------------------


def template_fields(template: str, where: str) -> list[str]:
    """The field names of a template; :class:`RuleError` for anything but ``{name[:spec]}``,
    ``{name!d[:spec]}`` (a duration, see :func:`_duration`) and ``{name!p:one|many}`` (a count,
    see :func:`_counted`)."""
    names = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise RuleError(f"{where}: bad template ({exc})") from None
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            raise RuleError(f"{where}: template field {{{name}}} must be a plain name "
                            "(no attribute or index access)")
        if conversion == "p":
            if not _PLURAL_SPEC_RE.match(spec or ""):
                raise RuleError(f"{where}: template field {{{name}!p}} needs its noun's two "
                                "forms, e.g. {copy_count!p:copy|copies}")
            names.append(name)
            continue
        if conversion and (conversion != "d" or name[-3:] not in _NS_PER):
            raise RuleError(f"{where}: template field {{{name}!{conversion}}}: the conversions "
                            "are !d (a duration field named *_ns, *_us or *_ms) and !p (a count)")
        if spec and ("{" in spec or not _FORMAT_SPEC_RE.match(spec)):
            raise RuleError(f"{where}: template field {{{name}:{spec}}}: format spec not allowed "
                            "(use e.g. :.1f, :d, :,)")
        names.append(name)
    return names


check_template = template_fields


#: Nanoseconds per unit of a duration field, by the suffix of its name (for ``!d``).
_NS_PER = {"_ns": 1, "_us": 1_000, "_ms": 1_000_000}


def _duration(name: str, value: Any, spec: str) -> str:
    """``{name!d:spec}``: a duration in the unit that suits its size (s, ms, µs or ns), so that a
    45 µs kernel reads "45.0 µs", not "0.0 ms", and a 12.9 s wait "12.9 s", not "12854.1 ms"; the
    spec's precision applies in that unit."""
    return duration_text(float(value) * _NS_PER[name[-3:]], spec)


def duration_text(ns: float, spec: str = ".1f") -> str:
    """A duration in nanoseconds, in the unit that suits its size (s, ms, µs or ns), the spec's
    precision in that unit: what ``{name!d:spec}`` prints, for text a detector composes."""
    size = abs(ns)
    scale, unit = ((1e9, "s") if size >= 1e9
                   else (1e6, "ms") if size >= 1e6 or size == 0
                   else (1e3, "µs") if size >= 1e3 else (1.0, "ns"))
    try:  # whole nanoseconds: a tenth of one means nothing in a trace
        number = format(ns / scale, spec or ".1f") if scale > 1 else f"{ns:.0f}"
    except ValueError:  # an integer spec (:d) on a scaled value
        number = f"{ns / scale:.0f}"
    return f"{number} {unit}"


#: ``{n!p:copy|copies}``: the singular and the plural of a count's noun.
_PLURAL_SPEC_RE = re.compile(r"^[^{}|]+\|[^{}|]+$")


def _counted(value: Any, spec: str) -> str:
    """``{n!p:copy|copies}``: "1 copy", "3 copies", "1,280 copies" (the count, with thousands
    separators, and the form of its noun)."""
    one, many = spec.split("|")
    count = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
    return f"{count} {one if value == 1 else many}"


def render(template: str, values: dict[str, Any], where: str) -> str:
    """Fill a validated template. Only plain names are looked up, never attributes or indexes."""
    out = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        if name not in values:
            raise RuleError(f"{where}: template field {{{name}}} is not a measured field or "
                            "parameter of this rule")
        value = values[name]
        if value is None:  # a field the trace does not give (shapes, steps, a device's SMs)
            out.append("not recorded")
            continue
        try:
            out.append(_duration(name, value, spec) if conversion == "d"
                       else _counted(value, spec) if conversion == "p"
                       else format(value, spec or ""))
        except (ValueError, TypeError):
            out.append(str(value))
    return " ".join("".join(out).split())
