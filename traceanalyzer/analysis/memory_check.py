"""Stop an analysis that cannot fit in memory before it starts, with a message, not the OOM killer.

The ingest checks the file before parsing it (``traceanalyzer.ingest.check_memory``); this checks
the loaded trace before the analysis: the views, every rule, the summaries, the timeline and the
reports need memory in proportion to the frames they start from. The estimate is the frames'
in-memory size (:func:`frames_size`: what their columns hold, shared text buffers once) times
:data:`ANALYSIS_MEMORY_PER_BYTE`, plus :data:`ANALYSIS_BASE_MEMORY`, compared with the memory the
process can still use (``traceanalyzer.ingest.available_memory``: the trace already loaded is
not counted twice). ``$TRACEANALYZER_NO_MEMORY_CHECK=1`` turns this check off, as it does the
ingest's.
"""

from __future__ import annotations

import os

import polars as pl
import pyarrow as pa

from traceanalyzer.errors import InputError
from traceanalyzer.ingest import NO_MEMORY_CHECK_ENV, available_memory
from traceanalyzer.model import Trace

#: Peak memory of the analysis per byte of the loaded frames, beyond what the process holds once
#: the trace is loaded. bench/NOTES.md ("Analysis memory") measures it on tiled Kineto and Nsight
#: Systems traces of several kinds; this is the worst of them with a margin, for traces unlike
#: those (long names, deep stacks, many ranks).
ANALYSIS_MEMORY_PER_BYTE = 5.0
#: What the analysis needs whatever the trace's size: rule modules, compiled patterns, Polars's
#: working buffers.
ANALYSIS_BASE_MEMORY = 100 << 20


def frames_size(trace: Trace) -> int:
    """Bytes the trace's frames take in memory: Polars's estimate, but for text columns the
    buffers they hold. A text column's rows are 16-byte views into buffers that rows share (a
    few hundred kernel names over millions of kernels), and Polars's estimate counts each row's
    text as if it were its own: 2.7 GB for the 1.7 GB of a 1 GB Nsight Systems export's
    frames, which refused a 2 GB export that fits (bench/NOTES.md, "nsys pages")."""
    return sum(_column_bytes(frame[name]) for frame in trace.frames().values()
               for name in frame.columns)


def _column_bytes(column: pl.Series) -> int:
    if column.dtype != pl.String:
        return int(column.estimated_size())
    if column.null_count() == column.len():
        return 0  # all null: Polars has not made its views
    held: dict[int, int] = {}
    for chunk in column.get_chunks():  # one by one: a chunk's export is not a copy
        exported = chunk.to_arrow(compat_level=pl.CompatLevel.newest())
        arrays = exported.chunks if isinstance(exported, pa.ChunkedArray) else [exported]
        for array in arrays:
            for buffer in array.buffers():
                if buffer is not None:
                    held[buffer.address] = buffer.size
    return sum(held.values())


def analysis_memory(trace: Trace) -> int:
    """Bytes the analysis of ``trace`` is expected to need at its peak, beyond the trace."""
    return ANALYSIS_BASE_MEMORY + int(frames_size(trace) * ANALYSIS_MEMORY_PER_BYTE)


def check_analysis_memory(trace: Trace) -> None:
    """Raise :class:`InputError` (exit 2, one line) when the analysis of ``trace`` would need more
    memory than the process can still use. Set $TRACEANALYZER_NO_MEMORY_CHECK=1 to try anyway."""
    if os.environ.get(NO_MEMORY_CHECK_ENV):
        return
    available = available_memory()
    if available is None:
        return
    need = analysis_memory(trace)
    if need <= available:
        return
    raise InputError(
        trace.meta.path,
        f"needs about {need / 2**30:.1f} GiB of memory to analyze ({frames_size(trace) / 2**30:.1f} "
        f"GiB of loaded events) and only {available / 2**30:.1f} GiB is available; analyze part "
        "of it (--steps, --time-window or --ranks), run it on a machine with more memory, or set "
        f"{NO_MEMORY_CHECK_ENV}=1 to try anyway",
    )
