"""What a text column's memory holds."""

from __future__ import annotations

import polars as pl


def text_data_bytes(column: pl.Series) -> int:
    """The bytes of a text column's data buffers (its long texts; views and bitmap left out)."""
    array = column.to_arrow(compat_level=pl.CompatLevel.newest())
    chunks = array.chunks if hasattr(array, "chunks") else [array]
    return sum(b.size for chunk in chunks for b in chunk.buffers()[2:] if b is not None)
