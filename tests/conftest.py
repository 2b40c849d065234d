"""Shared fixtures; the helpers they use live in tests/support/."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.kineto_builder import KinetoBuilder
from tests.support.paths import PUBLIC

#: The tests' user cache folder: the cache's default place ($XDG_CACHE_HOME/traceanalyzer) is a
#: fresh folder for each test session (child processes inherit it), never the user's own.
_CACHE_HOME = tempfile.mkdtemp(prefix="traceanalyzer-test-cache-")


def pytest_configure(config: pytest.Config) -> None:
    os.environ["XDG_CACHE_HOME"] = _CACHE_HOME
    os.environ.pop("TRACEANALYZER_CACHE_DIR", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_CACHE_HOME, ignore_errors=True)


@pytest.fixture
def public_dir() -> Path:
    if not PUBLIC.is_dir():
        pytest.skip("../shared/traces/public is not available")
    return PUBLIC


@pytest.fixture
def kineto() -> KinetoBuilder:
    return KinetoBuilder()


def _sqlite_engines() -> list[str]:
    from traceanalyzer.ingest.nsys import sqlite_columns, sqlite_pages

    return (["sqlite3"] + (["connectorx"] if sqlite_columns.has_connectorx() else [])
            + (["pages"] if sqlite_pages.AVAILABLE else []))


@pytest.fixture(params=_sqlite_engines())
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each SQLite engine the nsys ingest can use here (connectorx only when installed, the
    page reader only when compiled)."""
    monkeypatch.setenv("TRACEANALYZER_SQLITE_ENGINE", request.param)
    return request.param
