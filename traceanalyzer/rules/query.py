"""Declarative rules: Polars SQL over the canonical frames and the derived views.

A query rule names its tables (``gpu``, ``cpu``, ``launches``, ``idle_gaps``, ``steps``, ...) and
writes thresholds as ``:parameter`` placeholders. Placeholders are bound as numeric literals after
the parameter's type was validated, so no user text is ever spliced into SQL.

The SQL is checked against an allow-list before it runs (:func:`check_sql`): it is tokenized
(string literals, quoted identifiers, ``--`` and nested ``/* */`` comments), must be one
``SELECT``/``WITH`` statement, may read only the canonical tables (and its own ``WITH`` names)
after ``FROM``/``JOIN``, and may call only pure scalar, aggregate and window functions
(:data:`FUNCTIONS`). Comments are removed from what runs, so Polars runs exactly the tokens that
were checked. Table functions (``read_csv``, ``read_parquet``, ...) would read files: any name not
on the list is a :class:`RuleError`.

What a query returns is the evidence: one row per occurrence. The rule fires when there is at
least one row. Its impact is the sum of an ``impact_ns`` column when the query returns one, else
the length of the union of the rows' ``[start_ns, end_ns)`` intervals.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

import polars as pl

from traceanalyzer.errors import RuleError
from traceanalyzer.model import COLLECT_ENGINE

#: Tables a query may read, each an attribute of the analysis views.
TABLES: tuple[str, ...] = (
    "gpu", "cpu", "annotations", "syncs", "counters",
    "steps", "launches", "idle_gaps", "gpu_idle_gaps", "kernel_summary", "collectives",
    "kernel_metrics",
)

# A single-quoted string (with '' escapes), a double-quoted identifier, a comment, or a
# placeholder; matched together so placeholders inside strings and comments are left alone.
# Used by bind() on SQL that check_sql() has already tokenized and cleaned.
_TOKEN_RE = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|(?<![:\w]):([A-Za-z_]\w*)", re.S
)
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


#: Functions a query may call: pure scalar, aggregate and window functions of Polars SQL, and the
#: type names that take arguments in a CAST. Everything else (table functions such as
#: ``read_csv`` that read files, and any function added to Polars later) is rejected.
FUNCTIONS: frozenset[str] = frozenset("""
    abs acos acosd asin asind atan atan2 atan2d atand cbrt ceil ceiling cos cosd cot cotd degrees
    div exp floor ln log log10 log1p log2 mod pi pow power radians round sign sin sind sqrt tan
    tand trunc
    avg count first last max median min quantile_cont quantile_disc stddev stddev_samp stdev
    sum var var_samp variance corr covar covar_pop covar_samp array_agg string_agg bit_and bit_or
    bit_xor bit_count
    array_contains array_get array_length array_lower array_max array_mean array_min
    array_reverse array_sum array_to_string array_unique array_upper
    coalesce greatest if ifnull least nullif nvl
    bit_length char_length character_length concat concat_ws ends_with initcap left length lower
    ltrim normalize octet_length position regexp_like replace reverse right rtrim split_part
    starts_with strpos strptime string_to_array substr substring trim upper
    date date_part date_trunc extract strftime timestamp
    cast try_cast columns
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    nth_value
    decimal numeric varchar char character float
""".split())

#: Words after which ``(`` opens a group or a subquery, not a function call.
_PAREN_KEYWORDS = frozenset("""
    select from where and or not in exists as on using join over by having when then else case
    any all some distinct filter within union except intersect limit offset is like ilike between
    with
""".split())

#: Words that end a FROM list at their nesting depth.
_FROM_END = frozenset("""
    where group having order limit offset union except intersect window qualify fetch select
""".split())

_SPACE = " \t\n\r\f"
_OPS = "+-*/%=<>!|&^~,().;[]"
_WORD_RE = re.compile(r"[^\W\d]\w*")
_NUM_RE = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


class _Tok(NamedTuple):
    kind: str  # word, qword (quoted identifier), str, num, param, op, comment, space
    text: str  # as written
    value: str  # a word lowercased, a quoted identifier unquoted, else the text


def _tokenize(sql: str, where: str) -> list[_Tok]:
    def bad(why: str) -> RuleError:
        return RuleError(f"{where}: {why}")

    toks: list[_Tok] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in _SPACE:
            j = i
            while j < n and sql[j] in _SPACE:
                j += 1
            toks.append(_Tok("space", sql[i:j], " "))
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            toks.append(_Tok("comment", sql[i:j], ""))
        elif sql.startswith("/*", i):
            depth, j = 1, i + 2
            while depth and j < n:  # Polars SQL nests block comments
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                raise bad("a /* comment is not closed")
            toks.append(_Tok("comment", sql[i:j], ""))
        elif c == "'":
            if toks and toks[-1].kind in ("word", "num"):
                raise bad("prefixed string literals (E'...', X'...', N'...') are not allowed")
            j = i + 1
            while True:
                j = sql.find("'", j)
                if j < 0:
                    raise bad("a string literal is not closed")
                if sql.startswith("''", j):
                    j += 2
                    continue
                break
            text = sql[i:j + 1]
            if "\\" in text:  # an escape in some dialects: no reading that could differ
                raise bad("backslashes are not allowed in string literals")
            toks.append(_Tok("str", text, text))
            i = j + 1
            continue
        elif c in "\"`":
            j = i + 1
            while True:
                j = sql.find(c, j)
                if j < 0:
                    raise bad("a quoted identifier is not closed")
                if sql.startswith(c * 2, j):
                    j += 2
                    continue
                break
            name = sql[i + 1:j].replace(c * 2, c)
            if not name:
                raise bad("empty quoted identifier")
            toks.append(_Tok("qword", sql[i:j + 1], name))
            i = j + 1
            continue
        elif c.isdigit() or (c == "." and i + 1 < n and sql[i + 1].isdigit()):
            m = _NUM_RE.match(sql, i)
            assert m is not None
            j = m.end()
            if j < n and (sql[j].isalnum() or sql[j] == "_"):
                raise bad(f"malformed number {sql[i:j + 1]!r}")
            toks.append(_Tok("num", sql[i:j], sql[i:j]))
        elif _WORD_RE.match(sql, i):
            m = _WORD_RE.match(sql, i)
            assert m is not None
            j = m.end()
            toks.append(_Tok("word", sql[i:j], sql[i:j].lower()))
        elif c == ":":
            if sql.startswith("::", i):
                j = i + 2
                toks.append(_Tok("op", "::", "::"))
            elif (m := re.compile(r"[A-Za-z_]\w*").match(sql, i + 1)) and not (
                    toks and toks[-1].kind in ("word", "num", "qword")):
                j = m.end()
                toks.append(_Tok("param", sql[i:j], sql[i:j]))
            else:
                j = i + 1
                toks.append(_Tok("op", ":", ":"))
        elif c in _OPS:
            j = i + 1
            toks.append(_Tok("op", c, c))
        else:
            raise bad(f"character {c!r} is not allowed in a query")
        i = j
    return toks


def check_sql(sql: str, where: str) -> str:
    """Check a rule's query against the allow-list; return it as it will run (comments removed).

    Raises :class:`RuleError` for anything but one ``SELECT``/``WITH`` statement that reads the
    canonical tables (:data:`TABLES`, or names it defines with ``WITH``) and calls only
    :data:`FUNCTIONS`."""

    def bad(why: str) -> RuleError:
        return RuleError(f"{where}: {why}")

    toks = _tokenize(sql, where)
    sig = [t for t in toks if t.kind not in ("space", "comment")]
    if sig and sig[-1].text == ";":
        sig.pop()
    if not sig or sig[0].kind != "word" or sig[0].value not in ("select", "with"):
        raise bad("a query must be one SELECT (or WITH ... SELECT) statement")
    if any(t.text == ";" for t in sig if t.kind == "op"):
        raise bad("a query must be a single statement")

    match: dict[int, int] = {}
    opened: list[int] = []
    for k, t in enumerate(sig):
        if t.kind == "op" and t.text == "(":
            opened.append(k)
        elif t.kind == "op" and t.text == ")":
            if not opened:
                raise bad("unbalanced parentheses")
            match[opened.pop()] = k
    if opened:
        raise bad("unbalanced parentheses")

    def is_op(k: int, text: str) -> bool:
        return k < len(sig) and sig[k].kind == "op" and sig[k].text == text

    def is_word(k: int, *words: str) -> bool:
        return 0 <= k < len(sig) and sig[k].kind == "word" and sig[k].value in words

    # WITH name [(columns)] AS [[NOT] MATERIALIZED] (query) [, ...]: the names a query defines
    ctes: set[str] = set()
    not_calls: set[int] = set()  # "(" after a CTE name: its column list
    for k in range(len(sig)):
        if not is_word(k, "with"):
            continue
        j = k + 1
        if is_word(j, "recursive"):
            raise bad("WITH RECURSIVE is not allowed")
        while True:
            if j >= len(sig) or sig[j].kind not in ("word", "qword") or (
                    sig[j].kind == "word" and sig[j].value in _PAREN_KEYWORDS):
                raise bad("WITH must be followed by name AS (query)")
            ctes.add(sig[j].value)
            j += 1
            if is_op(j, "("):
                not_calls.add(j)
                j = match[j] + 1
            if not is_word(j, "as"):
                raise bad("WITH must be followed by name AS (query)")
            j += 1
            j += is_word(j, "not")
            j += is_word(j, "materialized")
            if not is_op(j, "("):
                raise bad("WITH must be followed by name AS (query)")
            j = match[j] + 1
            if not is_op(j, ","):
                break
            j += 1

    allowed = ", ".join(TABLES)

    def source(k: int) -> None:
        """What follows FROM, JOIN or a comma in a FROM list: a subquery or a table name."""
        if is_op(k, "("):
            return
        if k >= len(sig) or sig[k].kind not in ("word", "qword"):
            raise bad(f"FROM and JOIN must name a table ({allowed}) or a subquery")
        name = sig[k].value
        if is_op(k + 1, "("):
            raise bad(f"{name}(...): table functions (read_csv, read_parquet, ...) are not "
                      f"allowed; read the tables {allowed}")
        if is_op(k + 1, "."):
            raise bad(f"qualified table names ({name}.…) are not allowed; read the tables {allowed}")
        if name not in TABLES and name not in ctes:
            raise bad(f"unknown table {name!r}: a query reads only the tables {allowed} "
                      "and the names it defines with WITH")

    kinds: list[str] = []  # per open "(": "call" (function arguments) or "group"
    from_list: dict[int, bool] = {}  # nesting depth -> inside a FROM list
    for k, t in enumerate(sig):
        depth = len(kinds)
        if t.kind == "op" and t.text == "(":
            prev = sig[k - 1] if k else None
            kind = "group"
            if prev is not None and prev.kind in ("word", "qword") and k not in not_calls and not (
                    prev.kind == "word" and prev.value in _PAREN_KEYWORDS):
                name = prev.value.lower()
                if is_op(k - 2, "."):
                    raise bad(f"qualified function names (….{name}) are not allowed")
                if name.startswith(("read_", "scan_")):
                    raise bad(f"{name}(...): table functions (read_csv, read_parquet, ...) "
                              f"are not allowed; read the tables {allowed}")
                if name not in FUNCTIONS:
                    raise bad(f"function {name}() is not allowed in a query (see FUNCTIONS in "
                              "traceanalyzer/rules/query.py)")
                kind = "call"
            kinds.append(kind)
        elif t.kind == "op" and t.text == ")":
            from_list.pop(depth, None)
            kinds.pop()
        elif is_word(k, "from"):
            if kinds and kinds[-1] == "call":  # EXTRACT(x FROM y), TRIM(... FROM y)
                continue
            if is_word(k - 1, "distinct") and is_word(k - 2, "is", "not"):  # IS DISTINCT FROM
                continue
            from_list[depth] = True
            source(k + 1)
        elif is_word(k, "join"):
            from_list[depth] = True
            source(k + 1)
        elif t.kind == "op" and t.text == "," and from_list.get(depth):
            source(k + 1)
        elif t.kind == "word" and t.value in _FROM_END:
            from_list[depth] = False
    return "".join(" " if t.kind == "comment" else t.text for t in toks)


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
    bound = bind(check_sql(sql, where), params, where)
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
