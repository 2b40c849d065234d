"""Query rules are an allow-list (class 1 of issue 30: a rule must never read a local file).

``tests/reliability/corpus/sql/*.sql`` holds hostile queries (comment, string-literal, case,
quoting and nesting tricks around table functions, other tables, other statements): each must be
a one-line RuleError, both from ``check_sql`` and as a rule file through the real command line.
Queries a user may write (CTEs, subqueries, joins, window functions, EXTRACT ... FROM) still load,
and so does every built-in or documented ``query:`` rule.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO
from traceanalyzer.errors import RuleError
from traceanalyzer.rules import load_config
from traceanalyzer.rules.query import check_sql

SQL_CORPUS = REPO / "tests" / "reliability" / "corpus" / "sql"
HOSTILE = sorted(SQL_CORPUS.glob("*.sql"))

RULE = {
    "slug": "my-rule", "id": "USR002", "severity": "low", "title": "T",
    "message": "{count} rows", "quiet": "none", "rationale": "why", "fix": "how",
    "parameters": {"min_duration_us": {"default": 50, "unit": "us", "description": "d"}},
}

GOOD = [
    "SELECT name, start_ns, end_ns FROM gpu",
    "select name, start_ns, end_ns from GPU where kind = 'memset' -- read_csv('/etc/passwd')\n",
    "SELECT name, start_ns, end_ns /* read_csv('/etc/passwd') /* nested */ */ FROM gpu;",
    "SELECT '--' AS pad, 'read_csv(''x'')' AS s, name, start_ns, end_ns FROM \"gpu\"",
    "WITH long AS (SELECT * FROM gpu WHERE end_ns - start_ns >= :min_duration_us * 1000), "
    "n(c) AS (SELECT COUNT(*) FROM long) SELECT l.name, l.start_ns, l.end_ns FROM long l, n "
    "WHERE n.c > 0",
    "SELECT g.name, g.start_ns, g.end_ns FROM gpu g LEFT JOIN (SELECT rank, MAX(end_ns) AS e "
    "FROM steps GROUP BY rank) s USING (rank) WHERE g.end_ns <= COALESCE(s.e, g.end_ns)",
    "SELECT name, start_ns, end_ns, ROW_NUMBER() OVER (PARTITION BY stream ORDER BY start_ns) "
    "AS i, CAST(end_ns - start_ns AS DOUBLE) / 1e3 AS us FROM gpu WHERE name IS DISTINCT FROM "
    "'x' AND stream IN (SELECT stream FROM launches) ORDER BY start_ns LIMIT 10",
]


def rule_file(tmp: Path, sql: str) -> Path:
    path = tmp / "user-rule.yaml"
    path.write_text(yaml.safe_dump({**RULE, "query": sql}, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_query_is_rejected(case: Path, tmp_path: Path) -> None:
    sql = case.read_text(encoding="utf-8")
    with pytest.raises(RuleError) as info:
        check_sql(sql, "w")
    assert "\n" not in str(info.value)
    path = rule_file(tmp_path, sql)
    with pytest.raises(RuleError) as info:
        load_config([str(path)], [], None, use_project_config=False)
    assert str(path) in str(info.value) and "field 'query'" in str(info.value)
    assert "\n" not in str(info.value)


def test_sql_corpus_has_the_tricks() -> None:
    names = {p.stem for p in HOSTILE}
    assert {"string_dashdash_read_csv", "quoted_read_csv", "upper_case_space", "subquery", "cte",
            "comment_between_name_and_paren", "string_opens_comment"} <= names


@pytest.mark.parametrize("sql", GOOD)
def test_ordinary_queries_load(sql: str, tmp_path: Path) -> None:
    load_config([str(rule_file(tmp_path, sql))], [], None, use_project_config=False)


def test_comments_do_not_reach_polars() -> None:
    assert check_sql("SELECT a /* x */ FROM gpu -- y", "w") == "SELECT a   FROM gpu  "


def test_documented_and_builtin_query_rules_load(tmp_path: Path) -> None:
    docs = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if "\nquery:" in b]
    assert blocks, "docs/rules.md has a query rule example"
    paths = []
    for i, block in enumerate(blocks):
        paths.append(tmp_path / f"doc{i}.yaml")
        paths[-1].write_text(block, encoding="utf-8")
    load_config([str(p) for p in paths], [], None, use_project_config=False)
    for path in sorted((REPO / "rules").glob("*.yaml")):
        query = yaml.safe_load(path.read_text(encoding="utf-8")).get("query")
        if query:
            check_sql(query, path.name)


def test_the_issue_30_attack_through_the_cli(tmp_path: Path) -> None:
    """The rule of issue 30 read a file's lines into every report; now it is a usage error."""
    secret = tmp_path / "secret.csv"
    secret.write_text("column_1\nTOPSECRET\n", encoding="utf-8")
    sql = (f"SELECT *, '--' AS pad, 0 AS start_ns, 1 AS end_ns FROM read_csv('{secret}', "
           "has_header := true)")
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 5,
         "args": {"correlation": 1}}]}), encoding="utf-8")
    rule = rule_file(tmp_path, sql)
    out = tmp_path / "o.json"
    proc = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", "analyze", str(trace), "--no-cache",
         "--rules", str(rule), "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "TRACEANALYZER_DEBUG": ""})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "table functions" in lines[0] and str(rule) in lines[0]
    assert "TOPSECRET" not in proc.stdout + proc.stderr and not out.exists()
