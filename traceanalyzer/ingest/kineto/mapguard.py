"""Guard memory maps of trace files against the file being cut shorter while they are mapped.

Touching a mapped page past a file's new end raises SIGBUS, which ends the process without an
error line. The compiled extension (``_native/_mapguard.c``) installs a SIGBUS handler with the
first guard: a fault past the end of a guarded window maps a zero page there instead, and faults
anywhere else go to the previous handler. The scanner (:mod:`.jsonscan`) guards each window it
maps, and maps nothing without this extension; zeros are not JSON, so the decoder rejects the run
and the reader reads the file again as a stream.
"""

from __future__ import annotations

import mmap

try:
    from traceanalyzer.ingest.kineto._native import _mapguard
except ImportError:  # pragma: no cover - depends on how the package was installed
    _mapguard = None  # type: ignore[assignment]

AVAILABLE = _mapguard is not None


def guard_mapping(mapped: mmap.mmap) -> int:
    """Protect a memory map of a file from the file being cut shorter while it is mapped: pages
    past the new end read as zeros (which no decoder accepts as JSON) instead of ending the
    process with SIGBUS. Returns the slot to pass to :func:`unguard_mapping` before the map is
    closed; -1 when nothing guards it (no compiled guard, or every slot taken)."""
    return _mapguard.guard(mapped) if _mapguard is not None else -1


def unguard_mapping(slot: int) -> None:
    """Release a slot of :func:`guard_mapping` (-1: nothing to release)."""
    if slot >= 0 and _mapguard is not None:
        _mapguard.unguard(slot)
