"""Text columns that store each distinct text once.

A trace repeats a few hundred kernel and operator names, shapes and types over millions of
events. An Arrow string view of 16 bytes per row can point at one shared copy of each, but
Polars writes every row's text out again wherever it builds a text column row by row: the cast
from ``Categorical`` to ``String``, ``coalesce`` and ``when/then`` of texts (a 1 GB trace's names
then took ~190 MB: bench/NOTES.md, "Texts stored once"). These helpers work on the distinct
values and gather the result by row, which shares them.
"""

from __future__ import annotations

import polars as pl


def distinct_rows(column: pl.Series) -> tuple[pl.Series, pl.Series]:
    """``(distinct, rows)``: the distinct non-null values of a ``Categorical`` column, and for
    each row the position of its value in ``distinct`` (null for a null), so that
    ``values.gather(rows)`` spreads a value per distinct text over the rows."""
    distinct = column.drop_nulls().unique()
    codes = column.to_physical()
    if distinct.is_empty():
        return distinct, pl.repeat(None, column.len(), dtype=pl.UInt32, eager=True)
    distinct_codes = distinct.to_physical()
    top = int(distinct_codes.max())  # type: ignore[arg-type]  # Polars: max of a non-empty int column
    positions = pl.int_range(distinct.len(), dtype=pl.UInt32, eager=True)
    if top > 4 * column.len() + (1 << 16):  # codes of a long-lived process's other traces
        return distinct, codes.replace_strict(distinct_codes, positions, default=None)
    # A table by category code: each row's position is then a gather by its code.
    by_code = pl.repeat(None, top + 1, dtype=pl.UInt32, eager=True).scatter(
        distinct_codes, positions)
    return distinct, by_code.gather(codes)


def categories_as_text(column: pl.Series) -> pl.Series:
    """A column of categories as text, each distinct text stored once (Polars' cast writes every
    row's text out again). Any other column is cast to text."""
    if column.dtype != pl.Categorical:
        return column.cast(pl.String, strict=False)
    distinct, rows = distinct_rows(column)
    return distinct.cast(pl.String).gather(rows).alias(column.name)


def matches(column: pl.Series, pattern: str) -> pl.Series:
    """Whether each row's text matches the regular expression ``pattern`` (null for a null), as
    ``str.contains`` gives it, tested once per distinct text and gathered by row: a few hundred
    kernel names over a million rows made some patterns 0.35 CPU-s a test at 1 GB."""
    distinct, rows = distinct_rows(column.cast(pl.Categorical))
    return distinct.cast(pl.String).str.contains(pattern).gather(rows).alias(column.name)
