"""Assemble the canonical frames of a trace read as one group of chunks with the compiled pass
(``_eventassemble.c``), when it is built.

``kineto``'s Polars assembly is the reference: this gives its CPU, GPU, annotation and sync
frames from the compiled reduction's tables, or None, and the caller then uses the reference.
It exists for small traces (up to ``kineto.FIRST_GROUP_BYTES``, 64 MB). Their assembly does
little work, but in Polars it is a dozen kinds of query, and a fresh process pays for each kind
the first time it runs one: 10-15 ms of a 10 MB trace's ~28 ms read, which made a small trace's
MB/s half a large one's (bench/NOTES.md, round 15). Larger traces are reduced in several groups,
their text as categories to keep memory down, and assembled by Polars, where that cost is small
beside the work.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.categories import KERNEL_PATTERNS
from traceanalyzer.ingest import eventreduce
from traceanalyzer.model import COPY_KINDS, FRAME_SCHEMAS, MEMORY_KINDS

try:
    from traceanalyzer.ingest import _eventassemble
except ImportError:  # pragma: no cover - depends on how the package was installed
    _eventassemble = None

AVAILABLE = _eventassemble is not None and eventreduce.AVAILABLE

#: The frames it assembles, in the order of its tables.
FRAMES = ("cpu", "gpu", "annotations", "syncs")
_LETTERS = {pl.Int32: "i", pl.Int64: "l", pl.String: "t", pl.Boolean: "b"}


def layout(name: str) -> str:
    """The letters of a canonical frame's columns, as the compiled pass writes them (an Enum is
    text until cast)."""
    return "".join("t" if isinstance(dtype, pl.Enum) else _LETTERS[dtype]
                   for dtype in FRAME_SCHEMAS[name].values())


def assemble(tables: list[eventreduce.ReducedTable],
             rank: int) -> tuple[int, dict[str, pl.DataFrame]] | None:
    """(GPU kernels without a launch call, the frames by name) from the reduced tables of one
    group (cpu, gpu, annotations, syncs first, as ``kineto._Reduced`` holds them), or None."""
    if not AVAILABLE or not -(2**31) <= rank < 2**31:
        return None
    out: Any = _eventassemble.assemble(*tables[:len(FRAMES)], rank, KERNEL_PATTERNS,
                                       COPY_KINDS, MEMORY_KINDS)
    if out is None:
        return None
    without_launch, assembled = out
    frames = {}
    for name, (rows, letters, columns) in zip(FRAMES, assembled, strict=True):
        schema = FRAME_SCHEMAS[name]
        frame = eventreduce.frame(letters, tuple(schema), [(rows, columns)])
        for i, (col, dtype) in enumerate(schema.items()):
            if isinstance(dtype, pl.Enum):  # text that holds only the Enum's values, or null
                frame.replace_column(i, frame.get_column(col).cast(dtype))
        frames[name] = frame
    return without_launch, frames
