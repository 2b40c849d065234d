"""Shared fixtures; the helpers they use live in tests/support/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kineto_builder import KinetoBuilder
from tests.support.paths import PUBLIC


@pytest.fixture
def public_dir() -> Path:
    if not PUBLIC.is_dir():
        pytest.skip("../shared/traces/public is not available")
    return PUBLIC


@pytest.fixture
def kineto() -> KinetoBuilder:
    return KinetoBuilder()


def _sqlite_engines() -> list[str]:
    from traceanalyzer.ingest.nsys import sqlite_columns

    return ["sqlite3"] + (["connectorx"] if sqlite_columns.engine() == "connectorx" else [])


@pytest.fixture(params=_sqlite_engines())
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each SQLite engine the nsys ingest can use here (connectorx only when installed)."""
    monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", request.param)
    return request.param
