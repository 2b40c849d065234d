"""Text columns that store each distinct text once.

A trace repeats a few hundred kernel and operator names, shapes and types over millions of
events. An Arrow string view of 16 bytes per row can point at one shared copy of each, but
Polars writes every row's text out again wherever it builds a text column row by row: the cast
from ``Categorical`` to ``String``, ``coalesce`` and ``when/then`` of texts (a 1 GB trace's names
then took ~190 MB: bench/NOTES.md, "Texts stored once"). These helpers work on the distinct
values and gather the result by row, which shares them.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def spread(column: pl.Series, distinct: pl.Series, values: pl.Series) -> pl.Series:
    """``values`` (one for each of ``distinct``: the distinct non-null values of the
    ``Categorical`` ``column``, in any order) for each row of ``column``; null for a null. A
    text value is then shared by its rows, not copied for each."""
    codes = column.to_physical()
    if distinct.is_empty():
        return pl.repeat(None, column.len(), dtype=values.dtype, eager=True).alias(values.name)
    distinct_codes = distinct.to_physical()
    top = int(distinct_codes.max())  # type: ignore[arg-type]  # Polars: max of a non-empty int column
    if top > 4 * column.len() + (1 << 16):  # codes of a long-lived process's other traces
        rows = codes.replace_strict(
            distinct_codes, pl.int_range(distinct.len(), dtype=pl.UInt32, eager=True),
            default=None)
        return values.gather(rows).alias(values.name)
    # The values by category code: each row's is then a gather by its code.
    by_code = pl.repeat(None, top + 1, dtype=values.dtype, eager=True).scatter(
        distinct_codes, values)
    return by_code.gather(codes).alias(values.name)


def categories_as_text(column: pl.Series) -> pl.Series:
    """A column of categories as text, each distinct text stored once (Polars' cast writes every
    row's text out again). Any other column is cast to text."""
    if column.dtype != pl.Categorical:
        return column.cast(pl.String, strict=False)
    distinct = column.drop_nulls().unique()
    return spread(column, distinct, distinct.cast(pl.String)).alias(column.name)


def matches(column: pl.Series, pattern: str) -> pl.Series:
    """Whether each row's text matches the regular expression ``pattern`` (null for a null), as
    ``str.contains`` gives it, tested once per distinct text and gathered by row: a few hundred
    kernel names over a million rows made some patterns 0.35 CPU-s a test at 1 GB."""
    return matches_each(column, (pattern,))[0]


def matches_each(column: pl.Series, patterns: Sequence[str]) -> list[pl.Series]:
    """:func:`matches` of each of ``patterns``, the column's distinct texts found once."""
    categories = column.cast(pl.Categorical)
    distinct = categories.drop_nulls().unique()
    texts = distinct.cast(pl.String)
    return [spread(categories, distinct, texts.str.contains(p)).alias(column.name)
            for p in patterns]
