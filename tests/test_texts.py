"""Text columns that store each distinct text once (traceanalyzer.texts)."""

from __future__ import annotations

import polars as pl
import pytest

from tests.support.texts import text_data_bytes
from traceanalyzer.texts import categories_as_text, spread


@pytest.mark.parametrize("rows", [0, 1, 5_000])
def test_categories_as_text_equal_the_cast_and_store_each_text_once(rows):
    texts = [f"void at::native::kernel_with_a_long_name_{i % 7}<float>" for i in range(rows)]
    column = pl.Series("name", [None if i % 5 == 0 else t for i, t in enumerate(texts)],
                       dtype=pl.String).cast(pl.Categorical)
    out = categories_as_text(column)
    assert out.dtype == pl.String and out.name == "name"
    assert out.equals(column.cast(pl.String))
    assert text_data_bytes(out) <= 7 * len(texts[0]) + 64 if rows else out.len() == 0
    nulls = pl.Series("x", [None, None], dtype=pl.Categorical)
    assert categories_as_text(nulls).equals(pl.Series("x", [None, None], dtype=pl.String))
    plain = pl.Series("y", [1, None])
    assert categories_as_text(plain).equals(pl.Series("y", ["1", None]))


def test_spread_gives_each_row_its_values_value():
    column = pl.Series(["b", None, "a", "b", "c", "a"]).cast(pl.Categorical)
    distinct = column.drop_nulls().unique()
    values = distinct.cast(pl.String).str.to_uppercase()
    assert spread(column, distinct, values).to_list() == ["B", None, "A", "B", "C", "A"]
    empty = pl.Series([None, None], dtype=pl.Categorical)
    assert spread(empty, empty.drop_nulls(), pl.Series([], dtype=pl.Int64)).to_list() == [None] * 2


def test_a_few_rows_among_many_categories():
    """A long-lived process (batch mode) holds the categories of every trace it read: a short
    column whose codes are far above its length is looked up by hashing, not by a table as long
    as the codes."""
    earlier = pl.Series([f"earlier trace's text {i:06d}" for i in range(80_000)]).cast(
        pl.Categorical)
    column = pl.Series("n", ["a text made after them all 1", None, "a text made after them all 2",
                             "a text made after them all 1"]).cast(pl.Categorical)
    assert int(column.to_physical().max()) > 4 * column.len() + (1 << 16)
    assert categories_as_text(column).equals(column.cast(pl.String))
    assert earlier.len() == 80_000  # (kept alive: its categories hold the low codes)


def test_matches_is_str_contains_tested_once_per_text():
    from traceanalyzer.texts import matches

    names = pl.Series("name", ["multi_tensor_apply_kernel<Adam>", None, "ampere_sgemm",
                               "elementwise_kernel<lerp>", "ampere_sgemm"] * 50)
    for pattern in (r"(?i)multi_tensor|fused_adam", r"lerp|addcmul", r"^ampere", "nothing"):
        assert matches(names, pattern).equals(names.str.contains(pattern))
    empty = pl.Series("name", [], dtype=pl.String)
    assert matches(empty, "x").len() == 0


def test_matches_each_finds_the_distinct_texts_once_for_every_pattern():
    from traceanalyzer.texts import matches_each

    names = pl.Series("name", ["softmax_warp_forward", None, "ampere_sgemm", "fused_softmax"] * 9)
    patterns = ("softmax", "^fused", "gemm")
    assert [m.to_list() for m in matches_each(names, patterns)] == [
        names.str.contains(p).to_list() for p in patterns]
