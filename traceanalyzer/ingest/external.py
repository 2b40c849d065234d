"""What the ingest shares about the external programs it runs (nsys export, ncu --import)."""

from __future__ import annotations

import os

from traceanalyzer.errors import UsageError


def timeout_from_env(name: str, default: float) -> float:
    """Seconds an external program may run: ``$name`` when set (a number of seconds, else a
    one-line usage error), else ``default``."""
    named = os.environ.get(name, "").strip()
    if not named:
        return default
    try:
        value = float(named)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:
        raise UsageError(f"${name} must be a number of seconds, got {named[:40]!r}")
    return value
