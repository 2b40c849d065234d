"""Rule documentation, generated from the rule files: ``rules show`` and docs/rules.md.

docs/rules.md is this module's output for the built-in rules (``traceanalyzer rules docs >
docs/rules.md``); a test checks the two are in step.
"""

from __future__ import annotations

from collections.abc import Iterable

from traceanalyzer.rules.schema import UNITS, Rule

_HEADER = """\
# Rules

traceanalyzer's findings come from rules: one YAML file per rule in the top-level `rules/`
folder (shipped in the wheel). Each rule has a stable slug and id, a severity, a message filled
with measured numbers, its rationale, the fix, and parameters with units in their names.
A finding's severity follows its impact, the share of the GPU's active span it costs (first to
last GPU activity in the analyzed window, docs/metrics.md#shares): **critical**
at 40% or more, **high** at 10%, **medium** at 3%, **low** below that. So `--fail-on high` fails a
build for a problem that costs a tenth of the run, not for one that costs 0.5%, and a GPU idle
half its active span is critical. Findings are listed by impact, largest first, so severity and order
agree. A rule file's `severity` is the most its findings can get: every built-in rule says
`critical` (whatever its impact earns), a rule of your own may say less to keep its findings
below a level, and an `info` rule's findings stay `info`. When `--fail-on` makes `analyze` exit
with 1, it prints on stderr the findings that did it.
In a file that holds several ranks (an Nsight Systems export of several processes), the rules
judge each rank on its own: each finding names its rank, and its share is of that rank's GPU
span; the reports list a rule once, on its costliest rank, with its cost on the others. A file
of more than 64 ranks with GPU work has the headline and the 63 busiest judged, and says so.
A rule that cannot judge a trace (for example shapes were not recorded) reports
*not applicable* with the reason, instead of staying silent. A rule that crashes reports
*error* with the exception in one line: a bug in traceanalyzer, not a verdict on the trace.
The reports show it, `analyze` also warns on stderr, and the exit code stays what the findings
make it (`TRACEANALYZER_DEBUG=1` lets the exception through instead).

This page is generated from the rule files: `traceanalyzer rules docs > docs/rules.md`.
`traceanalyzer rules list` lists the rules with their parameters (the values in effect) and
`traceanalyzer rules show SLUG` prints one.

## Tuning and switching rules

    traceanalyzer analyze trace.json.gz --set gpu-idle-gaps.min_gap_us=200 --disable small-grid
    traceanalyzer analyze trace.json.gz --rules my_rules/ --enable my-rule

or, in a `traceanalyzer.yaml` in the working directory:

```yaml
rules: [my_rules/]          # extra rule files or folders, relative to this file
disable: [small-grid]
enable: []
parameters:
  gpu-idle-gaps: {min_gap_us: 200}
```

Command-line values win over the config file, which wins over the rule files' defaults.

## Writing a rule

A rule is a YAML file; detection is either a built-in detector, named after the rule it
serves (`detector: gpu_idle_gaps`, with that rule's parameters), or a
Polars SQL query over these tables: `gpu`, `cpu`, `annotations`, `syncs`, `counters` (the
canonical frames, see docs/canonical-model.md), `steps`, `launches` (GPU activity joined to the
launching call and operator), `idle_gaps` (per stream), `gpu_idle_gaps` (no stream busy),
`kernel_summary` and `collectives` (communication kernels with their transfer, wait and exposed
parts, see docs/metrics.md). Parameters appear in the query as `:name` and are bound as checked numbers.
The query returns one row per occurrence (the evidence); the rule fires when it returns a row.
Its impact is the sum of an `impact_ns` column, else the union of the rows' `start_ns`/`end_ns`.
The message may use `{count}`, `{impact_ms}`, `{impact_pct}`, `{per_step_ms}`, the parameters,
and for each result column `{top_COL}` (first row) and, for numbers, `{sum_COL}` / `{max_COL}`.
Fields take a format spec (`{impact_pct:.1f}`). A duration field (named `*_ms`, `*_us` or
`*_ns`) written `{impact_ms!d:.2f}` prints in the unit that suits its size: `12.34 s`,
`12.34 ms`, `45.00 µs`, `800 ns`. A count written `{count!p:memset|memsets}` prints with its noun:
`1 memset`, `3 memsets`.

```yaml
slug: long-memset
id: USR001
severity: low
title: Long memsets
message: "{count!p:memset|memsets} of {min_duration_us} µs or more, {impact_ms!d:.2f} in total"
quiet: "No memset of {min_duration_us} µs or more."
rationale: Clearing large buffers every step costs HBM bandwidth.
fix: Reuse buffers instead of zeroing them, or fuse the clear into the kernel that fills them.
parameters:
  min_duration_us: {default: 50, unit: us, description: Shortest memset reported.}
requires: [gpu]
query: |
  SELECT name, stream, start_ns, end_ns, end_ns - start_ns AS impact_ns
  FROM gpu WHERE kind = 'memset' AND end_ns - start_ns >= :min_duration_us * 1000
```

Parameter names end with their unit: `_ns`, `_us`, `_ms`, `_s`, `_pct`, `_count`, `_bytes`,
`_ratio`. Message templates accept only plain `{name}` and `{name:.1f}`-style fields.
@ALIASES@Adding a built-in rule (a detector, its proof traces and its tests):
[adding-a-rule.md](adding-a-rule.md). What each rule and view costs as a trace grows, and the
test that keeps every one of them linear: [complexity.md](complexity.md).

## Advice that fits the device

A fix that holds on one GPU can be wrong on another (BF16 and TF32 need compute capability 8.0,
FP8 8.9; ROCm has its own names and knobs). A rule file may give a message or a fix for some
devices under `devices:`; the engine takes the device the analyzed rank ran on (the recorded
GPU with the most activity) and, for the message and for the fix each, the first variant that
matches and has one, else the rule's own text, which must hold on any device (it says where
devices differ: the trace may not say which GPU it is).

```yaml
devices:
  - when: {vendor: nvidia, compute_capability_below: "8.0"}   # Volta, Turing
    fix: Train with torch.autocast(dtype=torch.float16) and a GradScaler ...
  - when: {vendor: amd}
    message: "... matrix cores were available."
    fix: ...
```

`when` takes `vendor` (`nvidia` or `amd`), `compute_capability_at_least` and
`compute_capability_below` (NVIDIA's compute capability, as text: `"8.9"`; they never match an
AMD GPU, whose traces record a gfx version in the same field, nor a GPU whose capability was not
recorded). Every key given must hold. A variant's message may use the same fields as the rule's.

## The built-in rules

"""


def _param_table(rule: Rule) -> list[str]:
    if not rule.parameters:
        return ["No parameters."]
    lines = ["| parameter | default | unit | meaning |", "| --- | --- | --- | --- |"]
    for p in rule.parameters.values():
        lines.append(f"| `{p.name}` | {p.default} | {UNITS[p.unit]} | {p.description} |")
    return lines


def _variants(rule: Rule, key: str) -> list[str]:
    """The rule's ``devices:`` variants of ``key`` (message or fix), one paragraph each."""
    return [f"*On {v.when.words()}:* {getattr(v, key)}" for v in rule.variants
            if getattr(v, key)]


def rule_markdown(rule: Rule, level: int = 3, *, examples: bool = True) -> str:
    """One rule's documentation in Markdown. ``examples``: list the repository's traces the
    rule fires on and stays silent on (docs/rules.md; not ``rules show``, whose readers have
    the installed package, not the repository)."""
    h = "#" * level
    how = f"built-in detector `{rule.detector}`" if rule.detector else "SQL query"
    lines = [
        f"{h} `{rule.slug}` ({rule.id}): {rule.title}",
        "",
        f"Severity: **{rule.severity}**. Detection: {how}."
        + ("" if rule.enabled else " Off by default (`--enable " + rule.slug + "`)."),
        "",
        "**Why it matters.** " + rule.rationale,
        "",
        "**Fix.** " + rule.fix,
        *[line for text in _variants(rule, "fix") for line in ("", text)],
        "",
        "**Parameters.**",
        "",
        *_param_table(rule),
        "",
        f"**Message.** {rule.message}",
        *[line for text in _variants(rule, "message") for line in ("", text)],
        "",
        f"**When nothing is found.** {rule.quiet}",
    ]
    if rule.requires:
        lines += ["", "**Not applicable when:** " + "; ".join(r.reason for r in rule.requires) + "."]
    if rule.query:
        lines += ["", "**Query.**", "", "```sql", rule.query.strip(), "```"]
    if examples and (rule.examples_fire or rule.examples_silent):
        lines += [""]
        if rule.examples_fire:
            lines.append("Fires on: " + ", ".join(f"`{e}`" for e in rule.examples_fire) + ".")
        if rule.examples_silent:
            lines.append("Stays silent on: " + ", ".join(f"`{e}`" for e in rule.examples_silent) + ".")
    if rule.references:
        lines += ["", "**References.**", "", *(f"- <{r}>" for r in rule.references)]
    return "\n".join(lines).rstrip() + "\n"


def rules_markdown(rules: Iterable[Rule]) -> str:
    """docs/rules.md for ``rules``: the header, an index table and each rule's section."""
    rules = sorted(rules, key=lambda r: r.id)
    index = ["| id | slug | severity | title |", "| --- | --- | --- | --- |"]
    index += [f"| {r.id} | [`{r.slug}`](#{r.slug}) | {r.severity} | {r.title} |" for r in rules]
    body = "\n".join(f'<a id="{r.slug}"></a>\n\n' + rule_markdown(r) for r in rules)
    return _HEADER.replace("@ALIASES@", _aliases()) + "\n".join(index) + "\n\n" + body


def _aliases() -> str:
    """The sentence on detectors' earlier names, from the registry."""
    from traceanalyzer.rules.detectors import aliases

    earlier = aliases()
    if not earlier:
        return ""
    names = ", ".join(f"`{old}` (`{new}`)" for old, new in sorted(earlier.items()))
    return ("Rule files may still name a detector by the name it had before it took its rule's: "
            f"{names}.\n")
