"""Checks that the nsys ingest's SQLite engines agree."""

from __future__ import annotations

from pathlib import Path

import pytest


def assert_engines_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nsys ingest gives the same frames and warnings through each engine it has here
    (the page reader, connectorx) as through sqlite3."""
    from traceanalyzer.ingest.nsys import read_nsys

    monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", "sqlite3")
    slow = read_nsys(path)
    for engine in ("connectorx", "pages"):
        monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", engine)
        fast = read_nsys(path)
        assert fast.meta.warnings == slow.meta.warnings, engine
        for name, frame in fast.frames().items():
            assert frame.equals(slow.frames()[name]), (engine, name)
