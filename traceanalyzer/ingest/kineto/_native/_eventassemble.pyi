"""Compiled assembly of a one-group Kineto trace (``_eventassemble.c``).

Python side: :mod:`traceanalyzer.ingest.kineto.assemble` (``AssembleArgs`` names the arguments).
"""

from collections.abc import Sequence
from typing import Any

#: (layout, batches): a reduced table, each batch (rows, columns) as ``_eventreduce.reduce``
#: made it.
_Spec = tuple[str, Sequence[tuple[int, Sequence[Any]]]]
#: (rows, layout, columns) in the canonical frame's column order, for ``_eventreduce.Batches``.
_Frame = tuple[int, str, tuple[Any, ...]]

def assemble(
    cpu: _Spec, gpu: _Spec, annotations: _Spec, syncs: _Spec, rank: int,
    patterns: tuple[tuple[str, str], ...], copy_kinds: tuple[str, ...],
    memory_kinds: tuple[str, ...], /,
) -> tuple[int, tuple[_Frame, _Frame, _Frame, _Frame]] | None:
    """(GPU kernels without a launch call, (cpu, gpu, annotations, syncs)), or None where it is
    not sure to give the Polars assembly's frames."""

def search(pattern: str, texts: list[str], /) -> list[bool] | None:
    """Whether the category matcher (``_regexlite.h``) finds ``pattern`` in each text; None for
    a pattern outside its syntax."""
