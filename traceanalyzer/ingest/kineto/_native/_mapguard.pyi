"""Memory maps safe from a file cut shorter while mapped (``_mapguard.c``).

Python side: :mod:`traceanalyzer.ingest.kineto.mapguard`.
"""

from typing_extensions import Buffer

def guard(mapping: Buffer, /) -> int:
    """Zero pages, not SIGBUS, past where the file is cut: the slot for :func:`unguard`, or -1
    (every slot taken: unguarded)."""

def unguard(slot: int, /) -> None:
    """Release ``slot``, before the mapping is closed."""
