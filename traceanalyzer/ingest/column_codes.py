"""Column type codes that Python and the compiled passes exchange.

The one Python side of ``_native/_columncodes.h`` (a test checks that the two agree): the kind of
each field the Kineto event decoder reads, and the letters of a reduced or assembled table's
layout.
"""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Any

import polars as pl


class ColumnKind(IntEnum):
    """The kind of a decoded field (``K_TEXT``, ``K_INT``, ``K_FLOAT`` in C)."""

    TEXT = 0
    INT = 1
    FLOAT = 2


class LayoutLetter(str, Enum):
    """A column's letter in a table's layout (``LAYOUT_*`` in C)."""

    TEXT = "t"
    INT64 = "l"
    INT32 = "i"
    BOOL = "b"


#: The kind the decoder reads a column of each Polars type as.
KIND_OF: dict[Any, ColumnKind] = {
    pl.String: ColumnKind.TEXT, pl.Int64: ColumnKind.INT, pl.Float64: ColumnKind.FLOAT,
}
#: The layout letter of a column of each Polars type (an Enum is text until cast).
LETTER_OF: dict[Any, str] = {
    pl.String: LayoutLetter.TEXT.value, pl.Int64: LayoutLetter.INT64.value,
    pl.Int32: LayoutLetter.INT32.value, pl.Boolean: LayoutLetter.BOOL.value,
}
