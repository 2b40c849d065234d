"""Checks that the nsys ingest's two SQLite engines agree."""

from __future__ import annotations

from pathlib import Path

import pytest


def assert_engines_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nsys ingest gives the same frames through connectorx and through sqlite3."""
    from traceanalyzer.ingest.nsys import read_nsys

    monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", "sqlite3")
    slow = read_nsys(path)
    monkeypatch.delenv("TRACEANALYZER_SQLITE_ENGINE")
    fast = read_nsys(path)
    for name, frame in fast.frames().items():
        assert frame.equals(slow.frames()[name]), name
