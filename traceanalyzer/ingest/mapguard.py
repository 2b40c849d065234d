"""Guard memory maps of trace files against the file being cut shorter while they are mapped.

Touching a mapped page past a file's new end raises SIGBUS, which ends the process without an
error line. The compiled extension (``_eventdecode.c``, which also holds the event decoder)
installs a SIGBUS handler with the first guard: a fault past the end of a guarded window maps a
zero page there instead, and faults anywhere else go to the previous handler. The scanner
(:mod:`traceanalyzer.ingest.jsonscan`) guards each window it maps; zeros are not JSON, so the
decoder rejects the run and the reader reads the file again as a stream.
"""

from __future__ import annotations

from typing import Any

try:
    from traceanalyzer.ingest import _eventdecode
except ImportError:  # pragma: no cover - depends on how the package was installed
    _eventdecode = None


def guard_mapping(mapped: Any) -> int:
    """Protect a memory map of a file from the file being cut shorter while it is mapped: pages
    past the new end read as zeros (which no decoder accepts as JSON) instead of ending the
    process with SIGBUS. Returns the slot to pass to :func:`unguard_mapping` before the map is
    closed; -1 when nothing guards it (no compiled decoder, or every slot taken)."""
    return _eventdecode.guard(mapped) if _eventdecode is not None else -1


def unguard_mapping(slot: int) -> None:
    if slot >= 0 and _eventdecode is not None:
        _eventdecode.unguard(slot)
