"""The rule engine: rule files (built-in and user-written), validation errors, configuration,
SQL queries, message templates, the rules CLI and the generated docs."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.paths import REPO
from tests.support.synth import Synth, busy_loop, run
from traceanalyzer.analysis.views import Views
from traceanalyzer.cli.rules import rules as rules_group
from traceanalyzer.errors import RuleError
from traceanalyzer.findings import severity_of
from traceanalyzer.rules import (
    RuleConfig,
    builtin_rule_files,
    builtin_rules_dir,
    builtin_slugs,
    evaluate,
    load_config,
    load_rules,
)
from traceanalyzer.rules.detectors import aliases, all_detectors, builtin_modules
from traceanalyzer.rules.docs import rules_markdown
from traceanalyzer.rules.query import bind
from traceanalyzer.rules.schema import UNITS, render, template_fields

SLUGS = builtin_slugs()
#: Test modules of tests/rules/ that are not one rule's.
GENERAL_TESTS = {"test_engine", "test_builtin_rules", "test_holdout", "test_manifest", "test_public",
                 "test_common",  # test_common: the detectors' shared helpers (_common.py)
                 "test_engine_ranks"}  # the engine on files of several ranks

USER_RULE = """\
slug: long-memset
id: USR001
severity: low
title: Long memsets
message: "{count} memsets of {min_duration_us} µs or more, {impact_ms:.2f} ms; worst on stream {top_stream}"
quiet: "No memset of {min_duration_us} µs or more."
rationale: Clearing large buffers every step costs HBM bandwidth.
fix: Reuse buffers instead of zeroing them.
parameters:
  min_duration_us: {default: 50, unit: us, description: Shortest memset reported.}
requires: [gpu]
query: |
  SELECT name, stream, start_ns, end_ns, end_ns - start_ns AS impact_ns
  FROM gpu
  WHERE kind = 'memset' AND end_ns - start_ns >= :min_duration_us * 1000  -- :not_a_param
  ORDER BY impact_ns DESC
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def memset_trace() -> Synth:
    s = Synth()
    end = busy_loop(s, n=5)
    s.kernel("Memset (Device)", end + 5, 120, kind="memset", stream=9)
    s.kernel("Memset (Device)", end + 200, 10, kind="memset")
    return s


# --- the built-in rule set ----------------------------------------------------------------------


def test_builtin_rules_are_the_rule_files_with_consecutive_ids():
    rules = load_rules([])
    assert sorted(r.slug for r in rules) == sorted(SLUGS)
    assert [r.id for r in rules] == [f"TA{i:03d}" for i in range(1, len(rules) + 1)]
    assert builtin_rules_dir() == REPO / "rules"
    assert builtin_rule_files() == sorted((REPO / "rules").glob("*.yaml"))
    assert [p.stem for p in builtin_rule_files()] == SLUGS  # each file named after its rule


@pytest.mark.parametrize("slug", SLUGS)
def test_each_rule_has_its_detector_and_its_tests_named_after_it(slug):
    """A new rule cannot skip them: ``rules/<slug>.yaml`` comes with the detector
    ``traceanalyzer/rules/detectors/<slug_>.py`` and the tests ``tests/rules/test_<slug_>.py``."""
    name = slug.replace("-", "_")
    rule = {r.slug: r for r in load_rules([])}[slug]
    if rule.detector is not None:  # a built-in query rule needs no detector
        assert rule.detector == name
        assert (REPO / "traceanalyzer" / "rules" / "detectors" / f"{name}.py").is_file()
        assert all_detectors()[name].func.__module__ == f"traceanalyzer.rules.detectors.{name}"
    assert (REPO / "tests" / "rules" / f"test_{name}.py").is_file()


def test_every_detector_module_and_rule_test_module_belongs_to_a_rule():
    names = {slug.replace("-", "_") for slug in SLUGS}
    assert set(builtin_modules()) <= names
    tests = {p.stem for p in (REPO / "tests" / "rules").glob("test_*.py")}
    assert tests - GENERAL_TESTS == {f"test_{name}" for name in names}


@pytest.mark.parametrize("slug", SLUGS)
def test_rule_examples_are_traces_in_the_repository(slug):
    rule = {r.slug: r for r in load_rules([])}[slug]
    assert rule.examples_fire and rule.examples_silent, "a rule shows a trace it fires on and one it does not"
    for example in rule.examples_fire + rule.examples_silent:
        path = (REPO / example).resolve()
        assert not Path(example).is_absolute() and path.is_relative_to(REPO), example
        assert path.is_file(), example


@pytest.mark.parametrize(("old", "new"), sorted(aliases().items()) or [("", "")])
def test_a_user_rule_may_name_a_detector_by_its_earlier_name(tmp_path, old, new):
    # Detectors took their rules' names; rule files written before keep working.
    if not old:
        pytest.skip("no detector has an earlier name")
    import yaml

    (rule,) = [r for r in load_rules([]) if r.detector == new]
    data = yaml.safe_load(Path(rule.path).read_text(encoding="utf-8"))
    data.update(slug=f"my-{rule.slug}", id="USR100", detector=old)
    write(tmp_path, "mine.yaml", yaml.safe_dump(data, allow_unicode=True))
    s = Synth()
    s.step(0, 0, 3000)
    for i in range(10):  # each kernel launched only after the previous one ended
        s.kernel("gemm", i * 300 + 10, 100, launch=i * 300 + 2)
    config = load_config([str(tmp_path)], [], None, use_project_config=False)
    outcomes = {o.slug: o for o in evaluate(Views(s.trace()), config)[1]}
    mine, builtin = outcomes[f"my-{rule.slug}"], outcomes[rule.slug]
    assert (mine.status, mine.reason) == (builtin.status, builtin.reason)


@pytest.mark.parametrize("slug", SLUGS)
def test_each_rule_file_is_complete_and_matches_its_detector(slug):
    rule = {r.slug: r for r in load_rules([])}[slug]
    assert Path(rule.path).name == f"{slug}.yaml"
    spec = all_detectors()[rule.detector]
    assert set(rule.parameters) == set(spec.params)
    assert spec.func.__doc__, "every detector documents what it measures"
    for name, param in rule.parameters.items():
        assert name.endswith("_" + param.unit) and param.unit in UNITS
        assert param.description and param.coerce(param.default, where=slug) == param.default
        assert f"`{name}`" in rules_markdown([rule]) or name in rule.rationale
    used = template_fields(rule.message, slug)
    assert used and set(used) <= set(spec.fields) | set(rule.parameters) | {
        "impact_ms", "impact_pct", "per_step_ms", "step_count", "window_ms"}
    # every measured field the detector promises is either shown or deliberately left to evidence
    assert len(rule.rationale) > 200 and len(rule.fix) > 80 and rule.references
    assert all(r.startswith("https://") for r in rule.references)
    assert rule.requires, "a rule names what it needs, to say 'not applicable' when it is missing"


def test_every_registered_detector_is_used_by_a_rule():
    used = {r.detector for r in load_rules([])}
    assert used == set(all_detectors())


def test_docs_are_generated_from_the_rule_files():
    expected = rules_markdown(load_rules([]))
    assert (REPO / "docs" / "rules.md").read_text(encoding="utf-8") == expected, (
        "docs/rules.md is stale: run `traceanalyzer rules docs > docs/rules.md`")


# --- a user-written rule ------------------------------------------------------------------------


def test_user_query_rule_fires_with_measured_message(tmp_path):
    write(tmp_path, "long-memset.yaml", USER_RULE)
    config = load_config([str(tmp_path)], [], None, use_project_config=False)
    findings, outcomes = evaluate(Views(memset_trace().trace()), config)
    mine = [f for f in findings if f.slug == "long-memset"]
    assert len(mine) == 1
    f = mine[0]
    assert f.message == "1 memsets of 50 µs or more, 0.12 ms; worst on stream 9"
    assert f.impact_ns == 120_000 and f.rule_id == "USR001" and f.severity == "low"
    assert f.evidence[0]["stream"] == 9 and f.evidence[0]["end_ns"] - f.evidence[0]["start_ns"] == 120_000
    assert {o.slug for o in outcomes} >= set(SLUGS) | {"long-memset"}


def test_a_user_rule_can_query_the_collectives_view(tmp_path):
    # The collectives view (transfer, wait and exposed parts of each communication kernel) is a
    # table of its own: a team can write its own threshold on one collective's wait.
    rule = USER_RULE.replace("slug: long-memset", "slug: long-wait").replace("USR001", "USR003")
    rule = rule[:rule.index("query: |")] + textwrap.dedent("""\
        query: |
          SELECT name, stream, start_ns, start_ns + wait_ns AS end_ns, exposed_wait_ns AS impact_ns
          FROM collectives WHERE exposed_wait_ns >= :min_duration_us * 1000
        """)
    write(tmp_path, "long-wait.yaml", rule)
    s = Synth()
    t = 0.0
    for n, dur in enumerate([3000, 300, 300]):  # the same all-reduce; step 0 waited 2.7 ms
        end = busy_loop(s, n=10, start=t)
        s.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", end + 2, dur, launch=t + 1, stream=20)
        s.step(n, t - 1, end + dur + 10 - t)
        t = end + dur + 12
    config = load_config([str(tmp_path)], [], None, use_project_config=False)
    (f,) = [f for f in evaluate(Views(s.trace()), config)[0] if f.slug == "long-wait"]
    assert f.impact_ns == 2_700_000 and f.evidence[0]["stream"] == 20


def test_user_rule_parameter_override_and_disable(tmp_path):
    write(tmp_path, "long-memset.yaml", USER_RULE)
    views = Views(memset_trace().trace())
    config = load_config([str(tmp_path)], ["long-memset.min_duration_us=500"], None,
                         use_project_config=False)
    findings, outcomes = evaluate(views, config)
    assert "long-memset" not in {f.slug for f in findings}
    assert {o.slug: o for o in outcomes}["long-memset"].reason == "No memset of 500 µs or more."
    config = load_config([str(tmp_path / "long-memset.yaml")], [], None, disable=["long-memset"],
                         use_project_config=False)
    assert "long-memset" not in {o.slug for o in evaluate(views, config)[1]}


def test_project_config_in_working_directory(tmp_path, monkeypatch):
    rules_dir = tmp_path / "my_rules"
    rules_dir.mkdir()
    write(rules_dir, "long-memset.yaml", USER_RULE)
    write(tmp_path, "traceanalyzer.yaml", """\
        rules: [my_rules]
        disable: [small-grid]
        parameters:
          gpu-idle-gaps: {min_gap_us: 250}
          long-memset: {min_duration_us: 100}
        report: {title: ignored by the rule engine}
        """)
    monkeypatch.chdir(tmp_path)
    config = load_config([], [], None)
    params = {r.slug: p for r, p in config.active()}
    assert "small-grid" not in params and params["gpu-idle-gaps"]["min_gap_us"] == 250
    assert params["long-memset"]["min_duration_us"] == 100
    # the command line wins over the config file
    config = load_config([], ["gpu-idle-gaps.min_gap_us=300"], None, enable=["small-grid"])
    params = {r.slug: p for r, p in config.active()}
    assert params["gpu-idle-gaps"]["min_gap_us"] == 300 and "small-grid" in params


# --- malformed rule files -----------------------------------------------------------------------

GOOD = {
    "slug": "my-rule", "id": "USR002", "severity": "low", "title": "T",
    "message": "{count} rows", "quiet": "none", "rationale": "why", "fix": "how",
    "query": "SELECT name, start_ns, end_ns FROM gpu",
}


def yaml_of(**changes: object) -> str:
    import yaml

    data = {**GOOD, **changes}
    return yaml.safe_dump({k: v for k, v in data.items() if v is not None}, allow_unicode=True)


BAD_FILES = [
    ("bad YAML", "slug: my-rule\nid: [unclosed\n", r"invalid YAML at line"),
    ("missing field", yaml_of(fix=None), r"rule 'my-rule': field 'fix': required"),
    ("wrong type", yaml_of(title=["a", "list"]), r"rule 'my-rule': field 'title': must be non-empty text"),
    ("bad severity", yaml_of(severity="urgent"), r"field 'severity': must be one of"),
    ("bad id", yaml_of(id="rule1"), r"field 'id'"),
    ("unknown key", yaml_of(serverity="low"), r"field 'serverity': unknown field"),
    ("unknown detector", yaml_of(query=None, detector="no_such_detector"),
     r"field 'detector': unknown detector 'no_such_detector'"),
    ("both detector and query", yaml_of(detector="gpu_idle_gaps"), r"exactly one of"),
    ("bad SQL", yaml_of(query="SELEC name FROM gpu"), r"field 'query'"),
    ("unknown column", yaml_of(query="SELECT no_such_column FROM gpu"), r"field 'query': the query does not run"),
    ("unknown table", yaml_of(query="SELECT * FROM secrets"), r"field 'query': unknown table 'secrets'"),
    ("two statements", yaml_of(query="SELECT 1 AS a FROM gpu; SELECT 2 AS b FROM gpu"), r"single statement"),
    ("not a select", yaml_of(query="DROP TABLE gpu"), r"one SELECT"),
    ("table function", yaml_of(query="SELECT * FROM read_csv('/etc/passwd')"), r"table functions"),
    ("unknown placeholder", yaml_of(query="SELECT * FROM gpu WHERE start_ns > :nope"),
     r"placeholder :nope is not a parameter"),
    ("parameter without unit suffix", yaml_of(parameters={"min_gap": {"default": 1, "unit": "us", "description": "d"}}),
     r"field 'parameters.min_gap': the name must end with its unit"),
    ("parameter default not a number", yaml_of(parameters={"min_gap_us": {"default": "ten", "unit": "us", "description": "d"}}),
     r"field 'parameters.min_gap_us': default must be a number"),
    ("template attribute access", yaml_of(message="{count.__class__}"), r"field 'message': template field"),
    ("template index access", yaml_of(message="{count[0]}"), r"field 'message'"),
    ("template unknown field", yaml_of(message="{nope} rows"), r"field 'message': template field \{nope\}"),
    ("detector parameters differ", yaml_of(query=None, detector="sync_memcpy", message="{call_count}",
                                            parameters={"min_x_pct": {"default": 1.0, "unit": "pct", "description": "d"}}),
     r"field 'parameters': do not match detector 'sync_memcpy' \(missing min_blocked_pct; unknown min_x_pct\)"),
    ("unknown frame in requires", yaml_of(requires=["nowhere.column"]), r"field 'requires': unknown frame"),
    ("devices not a list", yaml_of(devices={"vendor": "amd"}), r"field 'devices': must be a list"),
    ("device variant without text", yaml_of(devices=[{"when": {"vendor": "amd"}}]),
     r"field 'devices\[0\]': needs a message or a fix"),
    ("unknown vendor", yaml_of(devices=[{"when": {"vendor": "intel"}, "fix": "f"}]),
     r"field 'devices\[0\]\.when\.vendor': must be one of nvidia, amd"),
    ("unknown condition", yaml_of(devices=[{"when": {"gpu": "v100"}, "fix": "f"}]),
     r"field 'devices\[0\]\.when': must be a mapping of one or more of vendor"),
    ("bad capability", yaml_of(devices=[{"when": {"compute_capability_below": "volta"}, "fix": "f"}]),
     r"field 'devices\[0\]\.when\.compute_capability_below': must be a compute capability"),
    ("capability for amd", yaml_of(devices=[{"when": {"vendor": "amd", "compute_capability_below": "9.0"},
                                             "fix": "f"}]), r"compute capabilities are NVIDIA's"),
    ("variant message field", yaml_of(devices=[{"when": {"vendor": "amd"}, "message": "{nope}"}]),
     r"field 'devices\[0\].message': template field \{nope\}"),
]


@pytest.mark.parametrize("text,pattern", [(t, p) for _, t, p in BAD_FILES],
                         ids=[name for name, _, _ in BAD_FILES])
def test_malformed_rule_file_names_file_rule_and_field(tmp_path, text, pattern):
    path = write(tmp_path, "broken.yaml", text)
    with pytest.raises(RuleError) as info:
        load_config([str(path)], [], None, use_project_config=False)
    message = str(info.value)
    assert str(path) in message
    assert re.search(pattern, message), message
    assert "\n" not in message


def test_duplicate_ids_and_slugs_are_rejected(tmp_path):
    write(tmp_path, "a.yaml", yaml_of())
    write(tmp_path, "b.yaml", yaml_of())
    with pytest.raises(RuleError, match="also defined in"):
        load_rules([tmp_path])
    (tmp_path / "b.yaml").unlink()
    write(tmp_path, "b.yaml", yaml_of(slug="other-rule", id="TA001"))
    with pytest.raises(RuleError, match="TA001 is already used by rule 'gpu-idle-gaps'"):
        load_rules([tmp_path])


@pytest.mark.parametrize("sets,pattern", [
    (["gpu-idle-gaps.min_gap_us=abc"], r"min_gap_us must be an integer, got 'abc'"),
    (["gpu-idle-gaps.min_gap_us=1.5"], r"must be an integer"),
    (["gpu-idle-gaps.min_idle_pct=150"], r"must be <= 100"),
    (["gpu-idle-gaps.nope_us=1"], r"rule 'gpu-idle-gaps' has no parameter 'nope_us'"),
    (["no-such-rule.x_us=1"], r"unknown rule 'no-such-rule'"),
    (["gpu-idle-gaps=3"], r"expected SLUG.PARAMETER=VALUE"),
    (["gpu-idle-gaps.min_idle_pct=nan"], r"finite"),
])
def test_bad_set_values(sets, pattern):
    with pytest.raises(RuleError, match=pattern):
        load_config([], sets, None, use_project_config=False)


def test_unknown_slug_to_enable_or_disable():
    with pytest.raises(RuleError, match="unknown rule 'nope'"):
        load_config([], [], None, disable=["nope"], use_project_config=False)


# --- templates and SQL binding ------------------------------------------------------------------


def test_render_fills_only_plain_names():
    assert render("{a:.1f} ms, {b}", {"a": 1.25, "b": None}, "w") == "1.2 ms, not recorded"
    assert render("x  \n  y {a}", {"a": "z"}, "w") == "x y z"
    with pytest.raises(RuleError, match="not a measured field"):
        render("{missing}", {}, "w")
    for bad in ("{a.b}", "{a[0]}", "{a!r}", "{a:{b}}", "{0}", "{}"):
        with pytest.raises(RuleError):
            template_fields(bad, "w")


def test_render_durations_in_the_unit_that_suits_them():
    template = "took {t_ms!d:.1f}, {g_us!d}, {n_ns!d:.2f}"
    assert template_fields(template, "w") == ["t_ms", "g_us", "n_ns"]
    assert render(template, {"t_ms": 62.91, "g_us": 1500, "n_ns": 800}, "w") == (
        "took 62.9 ms, 1.5 ms, 800 ns")
    # Below a millisecond a fixed "ms" read "0.0 ms" for a 15 µs kernel.
    assert render("{t_ms!d:.1f}", {"t_ms": 0.0151}, "w") == "15.1 µs"
    # From a second up, seconds: "12854.1 ms" read as a number to count digits of.
    assert render("{t_ms!d:.1f}", {"t_ms": 12854.1}, "w") == "12.9 s"
    assert render("{t_ms!d:.1f}", {"t_ms": 999.9}, "w") == "999.9 ms"
    assert render("{t_ms!d:.1f}", {"t_ms": 0}, "w") == "0.0 ms"
    assert render("{t_ms!d:d}", {"t_ms": 0.25}, "w") == "250 µs"
    assert render("{t_ms!d}", {"t_ms": None}, "w") == "not recorded"
    for bad in ("{count!d}", "{t_ms!s}", "{t_s!d}"):  # a duration needs its unit in its name
        with pytest.raises(RuleError, match="the conversions are !d"):
            template_fields(bad, "w")


def test_render_counts_with_their_noun():
    template = "{n!p:copy|copies} and {m!p:GEMM|GEMMs}"
    assert template_fields(template, "w") == ["n", "m"]
    assert render(template, {"n": 1, "m": 3}, "w") == "1 copy and 3 GEMMs"
    assert render(template, {"n": 0, "m": None}, "w") == "0 copies and not recorded"
    for bad in ("{n!p}", "{n!p:copy}", "{n!p:a|b|c}"):
        with pytest.raises(RuleError, match="two forms"):
            template_fields(bad, "w")


def test_sql_parameters_are_bound_as_numbers_only():
    sql = "SELECT ':x' AS s, \"col:x\" FROM gpu WHERE a > :x AND b < :y -- :z\n"
    bound = bind(sql, {"x": 5, "y": -2.5}, "w")
    assert bound == "SELECT ':x' AS s, \"col:x\" FROM gpu WHERE a > 5 AND b < (-2.5) -- :z\n"
    with pytest.raises(TypeError):
        bind("SELECT :x", {"x": "1; DROP TABLE gpu"}, "w")  # type: ignore[dict-item]


# --- outcomes -----------------------------------------------------------------------------------


def test_not_applicable_is_distinct_from_quiet():
    s = Synth()
    busy_loop(s, n=5)
    _, outcomes = evaluate(Views(s.trace()), RuleConfig())
    by = {o.slug: o for o in outcomes}
    assert len(outcomes) == len(SLUGS)
    assert by["odd-matmul-shape"].status == "not_applicable"
    assert by["gpu-idle-gaps"].status == "quiet" and by["gpu-idle-gaps"].reason


def test_empty_trace_every_rule_not_applicable():
    _, outcomes = evaluate(Views(Synth().trace()), RuleConfig())
    assert {o.status for o in outcomes} == {"not_applicable"}
    assert all(o.reason for o in outcomes)


# --- CLI ----------------------------------------------------------------------------------------


def test_cli_rules_list_and_show(tmp_path):
    runner = CliRunner()
    out = runner.invoke(rules_group, ["list"])
    assert out.exit_code == 0
    for slug in SLUGS:
        assert slug in out.output
    out = runner.invoke(rules_group, ["show", "hidden-sync"])
    assert out.exit_code == 0
    assert "aten::_local_scalar_dense" in out.output and "min_impact_pct" in out.output
    out = runner.invoke(rules_group, ["show", "TA001", "--set", "gpu-idle-gaps.min_gap_us=250"])
    assert out.exit_code == 0 and "In effect: min_gap_us=250" in out.output
    write(tmp_path, "long-memset.yaml", USER_RULE)
    out = runner.invoke(rules_group, ["list", "--json", "--rules", str(tmp_path)])
    assert out.exit_code == 0 and '"slug": "long-memset"' in out.output


def test_cli_rules_errors(tmp_path):
    out = CliRunner().invoke(rules_group, ["show", "no-such-rule"])
    assert isinstance(out.exception, RuleError)
    from traceanalyzer.cli.main import main  # the root command turns RuleError into exit code 2

    for argv in (["rules", "show", "no-such-rule"],
                 ["rules", "list", "--set", "gpu-idle-gaps.min_gap_us=abc"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2


def test_cli_rules_docs_matches_file():
    out = CliRunner().invoke(rules_group, ["docs"])
    assert out.exit_code == 0
    assert out.output == (REPO / "docs" / "rules.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("rule", "impact_pct", "expected"), [
    ("critical", 50.0, "critical"), ("critical", 40.0, "critical"), ("critical", 39.9, "high"),
    ("critical", 10.0, "high"), ("critical", 9.9, "medium"), ("critical", 3.0, "medium"),
    ("critical", 0.4, "low"), ("high", 45.0, "high"), ("high", 9.9, "medium"),
    ("medium", 45.0, "medium"), ("low", 80.0, "low"), ("info", 80.0, "info"), ("info", 0.0, "info"),
])
def test_a_findings_severity_follows_its_impact_up_to_its_rules(rule, impact_pct, expected):
    assert severity_of(rule, impact_pct) == expected


@pytest.mark.parametrize("slug", SLUGS)
def test_every_builtin_rule_can_reach_critical(slug):
    # The help and docs say severity follows impact: no built-in rule caps it below critical.
    rule = {r.slug: r for r in load_rules([])}[slug]
    assert rule.severity in ("critical", "info")


def test_a_gpu_idle_half_the_window_is_critical_and_findings_rank_by_impact():
    s = Synth()
    t = 0
    for _ in range(20):  # 100 µs kernels with 100 µs host gaps between them: idle 50%
        s.kernel("void at::native::vectorized_elementwise_kernel<4>", t, 100)
        t += 200
    findings, _ = run(s)
    f = findings["gpu-idle-gaps"]
    assert f.impact_pct >= 40 and f.severity == "critical"
    ordered = list(findings.values())
    assert [x.impact_ns for x in ordered] == sorted((x.impact_ns for x in ordered), reverse=True)


def test_a_high_rule_with_a_small_impact_reports_low():
    # nccl-not-overlapped is a high rule; with its threshold at 0 it fires on 2.5% of the window.
    s = Synth()
    busy_loop(s, n=200)
    s.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 200 * 202 + 2, 1000, stream=20)
    findings, _ = run(s, **{"nccl-not-overlapped": {"min_exposed_pct": 0}})
    f = findings["nccl-not-overlapped"]
    assert 0 < f.impact_pct < 3 and f.severity == "low"


# --- a detector that crashes ---------------------------------------------------------------------


def _crash(views, p):
    raise ZeroDivisionError("float division by zero\nsecond line of the message")


@pytest.fixture
def crashing_small_grid(monkeypatch):
    """small-grid's detector replaced by one that raises, as a bug in it would."""
    from dataclasses import replace

    from traceanalyzer.rules.detectors import DETECTORS

    all_detectors()
    monkeypatch.setitem(DETECTORS, "small_grid", replace(DETECTORS["small_grid"], func=_crash))


def test_a_crashing_detector_is_an_error_not_a_verdict(crashing_small_grid):
    s = Synth()
    busy_loop(s, n=5)
    findings, outcomes = evaluate(Views(s.trace()), RuleConfig())
    by = {o.slug: o for o in outcomes}
    assert by["small-grid"].status == "error"
    assert by["small-grid"].reason == "ZeroDivisionError: float division by zero"
    # the other rules still judge the trace
    assert by["gpu-idle-gaps"].status == "quiet" and len(outcomes) == len(SLUGS)


def test_a_crashing_detector_raises_under_debug(crashing_small_grid, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_DEBUG", "1")
    s = Synth()
    busy_loop(s, n=5)
    with pytest.raises(ZeroDivisionError):
        evaluate(Views(s.trace()), RuleConfig())


def test_every_output_shows_a_rule_error_as_the_tools(crashing_small_grid, tmp_path):
    import json

    from traceanalyzer.cli.main import cli
    from traceanalyzer.report.jsonout import JSON_SCHEMA, validate

    trace = REPO / "sample_traces" / "torch" / "odd_matmul_shape_bad.json.gz"
    out = {ext: tmp_path / f"report.{ext}" for ext in ("json", "md", "html")}
    args = ["analyze", str(trace), "--cache-dir", str(tmp_path / "cache"), "--json",
            str(out["json"]), "--markdown", str(out["md"]), "--html", str(out["html"])]
    res = CliRunner().invoke(cli, args + ["--fail-on", "critical"], catch_exceptions=False)
    # an error is no finding: the exit code is the findings' (odd-matmul-shape costs 60% here,
    # gemm-below-roofline 68%: the same 4095-wide GEMMs)
    assert res.exit_code == 1
    failed = [line for line in res.stderr.splitlines() if line.startswith("fail-on: ")]
    assert {line.split()[1] for line in failed} == {"odd-matmul-shape", "gemm-below-roofline"}
    assert any(line.startswith("fail-on: odd-matmul-shape (TA010) is critical") for line in failed)
    assert "warning:" in res.stderr and "rule small-grid failed (ZeroDivisionError" in res.stderr
    assert ("Rule errors (bugs in traceanalyzer, not verdicts on this trace): small-grid "
            "(ZeroDivisionError: float division by zero)") in res.stdout
    doc = json.loads(out["json"].read_text())
    (outcome,) = [o for o in doc["rule_outcomes"] if o["slug"] == "small-grid"]
    assert outcome["status"] == "error" and validate(doc, JSON_SCHEMA) == []
    assert "1 rule(s) failed with an error in traceanalyzer" in out["md"].read_text()
    html = out["html"].read_text()
    assert 'class="status-error">error in traceanalyzer<' in html
    # an error may be transient (memory): the result is not cached
    assert not list((tmp_path / "cache").rglob("result.json"))


def test_fail_on_says_which_findings_failed_the_build():
    from traceanalyzer.cli.analyze import analyze

    trace = REPO / "sample_traces" / "torch" / "hidden_sync_bad.json.gz"
    result = CliRunner().invoke(analyze, [str(trace), "--no-cache", "--fail-on", "medium"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("fail-on: ")]
    assert lines and any("hidden-sync (TA002) is " in line for line in lines)
    assert all("at or above --fail-on medium" in line and "% of the GPU's active span" in line
               for line in lines)
    passed = CliRunner().invoke(analyze, [str(trace), "--no-cache", "--fail-on", "critical"])
    if passed.exit_code == 0:
        assert "fail-on:" not in passed.stderr


# --- advice that fits the device ------------------------------------------------------------------


def test_device_variants_pick_the_message_and_fix_for_the_analyzed_gpu(tmp_path):
    from traceanalyzer.model import Device

    text = yaml_of(devices=[
        {"when": {"vendor": "nvidia", "compute_capability_below": "8.0"}, "fix": "volta fix"},
        {"when": {"vendor": "amd"}, "message": "amd: {count}", "fix": "amd fix"},
        {"when": {"vendor": "nvidia", "compute_capability_at_least": "8.9"}, "message": "fp8: {count}"},
    ])
    config = load_config([str(write(tmp_path, "r.yaml", text))], [], None, use_project_config=False)
    seen = {}
    for key, device in {
        "v100": Device(0, "Tesla V100-SXM2-16GB", 80, None, "7.0", "nvidia"),
        "a100": Device(0, "NVIDIA A100", 108, None, "8.0", "nvidia"),
        "h100": Device(0, "NVIDIA H100", 132, None, "9.0", "nvidia"),
        "mi250": Device(0, "AMD Radeon Graphics", 104, None, "9.0", "amd"),
        "unknown": Device(0, None, None, None, None, None),
    }.items():
        s = memset_trace()
        s.devices = [device]
        findings, _ = evaluate(Views(s.trace()), config)
        (f,) = [f for f in findings if f.slug == "my-rule"]
        seen[key] = (f.message.split(" ")[0], f.fix)
    assert seen["v100"][1] == "volta fix" and seen["mi250"] == ("amd:", "amd fix")
    assert seen["h100"][0] == "fp8:" and seen["h100"][1] == seen["a100"][1] == seen["unknown"][1]
    assert seen["a100"][0] == seen["unknown"][0] != "fp8:"  # an MI250's "9.0" is no capability


def test_device_variants_are_in_the_docs():
    rule = {r.slug: r for r in load_rules([])}["fp32-matmul"]
    text = rules_markdown([rule])
    assert "*On NVIDIA GPUs of compute capability below 8.0:*" in text
    assert "*On AMD GPUs (ROCm):*" in text


#: What users read must not point into this repository or its workspace.
INTERNAL = re.compile(r"sample_traces|held[- ]out|holdout|\.\./|shared/(docs|traces)|good twin|"
                      r"reference workload|tests/|scripts/|_bad\b|_good\b|workloads?/", re.I)


@pytest.mark.parametrize("slug", SLUGS)
def test_no_user_facing_text_names_repository_internals(slug):
    rule = {r.slug: r for r in load_rules([])}[slug]
    texts = {"title": rule.title, "message": rule.message, "quiet": rule.quiet,
             "rationale": rule.rationale, "fix": rule.fix}
    texts |= {f"parameters.{p.name}": p.description for p in rule.parameters.values()}
    texts |= {r.need: r.reason for r in rule.requires}
    for i, v in enumerate(rule.variants):
        texts |= {f"devices[{i}].message": v.message or "", f"devices[{i}].fix": v.fix or ""}
    bad = {key: INTERNAL.search(text).group(0) for key, text in texts.items() if INTERNAL.search(text)}
    assert not bad, bad


def test_no_detector_text_names_repository_internals():
    # The strings detectors put into messages (verdicts, notes), not their comments or docstrings.
    import ast

    folder = REPO / "traceanalyzer" / "rules" / "detectors"
    paths = sorted(folder.glob("*.py")) + [REPO / "traceanalyzer" / "findings.py"]
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and INTERNAL.search(node.value)):
                found.append(f"{path.name}:{node.lineno}: {node.value[:60]}")
    assert not found, found


def test_rules_show_and_list_say_what_users_need():
    out = CliRunner().invoke(rules_group, ["show", "nccl-not-overlapped"])
    assert out.exit_code == 0 and "sample_traces" not in out.output and "shared/" not in out.output
    listed = CliRunner().invoke(rules_group, ["list"])
    assert listed.exit_code == 0 and "parameters" in listed.output.splitlines()[0]
    assert "min_gap_us=100" in listed.output
