"""Declarative rules: Polars SQL over the canonical frames and the derived views.

A query rule names its tables (``gpu``, ``cpu``, ``launches``, ``idle_gaps``, ``steps``, ...) and
writes thresholds as ``:parameter`` placeholders. Placeholders are bound as numeric literals after
the parameter's type was validated, so no user text is ever spliced into SQL. Only one
``SELECT``/``WITH`` statement is allowed, and no table functions (they would read files).

What a query returns is the evidence: one row per occurrence. The rule fires when there is at
least one row. Its impact is the sum of an ``impact_ns`` column when the query returns one, else
the length of the union of the rows' ``[start_ns, end_ns)`` intervals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import polars as pl

from traceanalyzer.errors import RuleError
from traceanalyzer.model import COLLECT_ENGINE

#: Tables a query may read, each an attribute of the analysis views.
TABLES: tuple[str, ...] = (
    "gpu", "cpu", "annotations", "syncs", "counters",
    "steps", "launches", "idle_gaps", "gpu_idle_gaps", "kernel_summary", "collectives",
)

# A single-quoted string (with '' escapes), a double-quoted identifier, a comment, or a
# placeholder; matched together so placeholders inside strings and comments are left alone.
_TOKEN_RE = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|(?<![:\w]):([A-Za-z_]\w*)", re.S
)
_TABLE_FUNC_RE = re.compile(r"\bread_\w+\s*\(", re.I)
_STATEMENT_RE = re.compile(r"^\s*(select|with)\b", re.I)


def _literal(value: int | float) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"parameter values are numbers, got {type(value).__name__}")
    text = str(int(value)) if isinstance(value, int) else format(float(value), ".12f").rstrip("0")
    if text.endswith("."):
        text += "0"
    return f"({text})" if text.startswith("-") else text


def bind(sql: str, params: Mapping[str, int | float], where: str) -> str:
    """Replace ``:name`` placeholders with validated numeric literals."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)
        if name not in params:
            raise RuleError(f"{where}: placeholder :{name} is not a parameter of this rule")
        return _literal(params[name])

    return _TOKEN_RE.sub(substitute, sql)


def check_sql(sql: str, where: str) -> None:
    stripped = re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S).strip().rstrip(";")
    if not _STATEMENT_RE.match(stripped):
        raise RuleError(f"{where}: a query must be one SELECT (or WITH ... SELECT) statement")
    if ";" in _TOKEN_RE.sub(lambda m: "" if m.group(1) is None else m.group(0), stripped):
        raise RuleError(f"{where}: a query must be a single statement")
    if _TABLE_FUNC_RE.search(stripped):
        raise RuleError(f"{where}: table functions (read_csv, read_parquet, ...) are not allowed; "
                        f"read the tables {', '.join(TABLES)}")


def referenced_tables(sql: str) -> list[str]:
    return [t for t in TABLES if re.search(rf"\b{t}\b", sql, re.I)]


def _for_sql(frame: pl.DataFrame | pl.LazyFrame) -> pl.LazyFrame:
    """Enum columns become text: SQL compares them with string literals."""
    lazy = frame.lazy()
    schema = lazy.collect_schema()
    casts = [
        pl.col(n).cast(pl.String)
        for n, t in schema.items()
        if isinstance(t, (pl.Enum, pl.Categorical))
    ]
    return lazy.with_columns(casts) if casts else lazy


def run_query(
    sql: str, params: Mapping[str, int | float], tables: Mapping[str, pl.DataFrame], where: str,
    *, eager: bool = True,
) -> pl.DataFrame | pl.LazyFrame:
    """Run a rule's query over ``tables`` (name -> frame). Raises :class:`RuleError` on bad SQL."""
    check_sql(sql, where)
    bound = bind(sql, params, where)
    ctx = pl.SQLContext(register_globals=False)
    for name in referenced_tables(bound):
        if name in tables:
            ctx.register(name, _for_sql(tables[name]))
    try:
        lazy = ctx.execute(bound, eager=False)
        if not eager:
            lazy.collect_schema()
            return lazy
        return lazy.collect(engine=COLLECT_ENGINE)
    except (pl.exceptions.PolarsError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RuleError(f"{where}: the query does not run: {first}") from None
