"""Issue 29.2 as a user meets it: the cache goes to the user cache folder, never beside the
trace (a read-only trace folder included); -v says when a result came from it; cache info and
cache clear."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.paths import SAMPLES

TRACE = SAMPLES / "torch" / "fp32_matmul_bad.json.gz"

pytestmark = pytest.mark.skipif(not TRACE.is_file(), reason="sample trace missing")


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A user cache folder of the test's own (children inherit the environment)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("TRACEANALYZER_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRACEANALYZER_CACHE_MAX", raising=False)
    return tmp_path / "xdg" / "traceanalyzer"


@pytest.fixture
def readonly(tmp_path: Path):
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(TRACE, folder / "t.json.gz")
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    yield folder
    folder.chmod(stat.S_IRWXU)


def test_read_only_trace_folder_and_cache_messages(home: Path, readonly: Path,
                                                   tmp_path: Path) -> None:
    before = sorted(os.listdir(readonly))
    first = run_cli("analyze", str(readonly / "t.json.gz"), "-v", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "computed, not from the cache" in first.stderr and str(home) in first.stderr
    assert sorted(os.listdir(readonly)) == before  # nothing beside the trace (even as root)
    again = run_cli("analyze", str(readonly / "t.json.gz"), "-v", cwd=tmp_path)
    assert "result from the cache" in again.stderr
    assert again.stdout == first.stdout
    info = run_cli("cache", "info")
    assert info.returncode == 0
    assert f"cache: {home}" in info.stdout and "5.0 GiB" in info.stdout
    assert "1 ingested traces, 1 analysis results" in info.stdout
    cleared = run_cli("cache", "clear")
    assert cleared.returncode == 0 and "removed 2 entries" in cleared.stdout
    assert "entries: 0" in run_cli("cache", "info").stdout
    assert sorted(os.listdir(readonly)) == before


def test_cache_dir_option_and_env(home: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "mine"
    done = run_cli("analyze", str(TRACE), "-qq", "--cache-dir", str(mine))
    assert done.returncode == 0, done.stderr
    assert "2 entries" not in run_cli("cache", "info").stdout  # the default one stayed empty
    assert not home.exists() or not any(home.iterdir())
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(mine))
    assert "entries: 2" in run_cli("cache", "info").stdout
    assert "removed 2 entries" in run_cli("cache", "clear", "--cache-dir", str(mine)).stdout


def test_no_cache_writes_nothing(home: Path, tmp_path: Path) -> None:
    done = run_cli("analyze", str(TRACE), "--no-cache", "-v", cwd=tmp_path)
    assert done.returncode == 0 and "not used (--no-cache)" in done.stderr
    assert not home.exists()


def test_bad_cache_max_is_one_line(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEANALYZER_CACHE_MAX", "plenty")
    done = run_cli("analyze", str(TRACE), "-qq")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "TRACEANALYZER_CACHE_MAX" in done.stderr
