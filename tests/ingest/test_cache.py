"""Issue 29.2: where the cache lives, its size bound (least recently used out), and clearing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from traceanalyzer.errors import UsageError
from traceanalyzer.ingest import cache


def test_user_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cache.sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.user_cache_dir() == tmp_path / "xdg" / "traceanalyzer"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # invalid by the XDG rule: ignored
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.user_cache_dir() == tmp_path / ".cache" / "traceanalyzer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.user_cache_dir() == tmp_path / ".cache" / "traceanalyzer"
    monkeypatch.setattr(cache.sys, "platform", "darwin")
    assert cache.user_cache_dir() == tmp_path / "Library" / "Caches" / "traceanalyzer"


def test_cache_root_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(tmp_path / "env"))
    assert cache.cache_root(tmp_path / "opt") == tmp_path / "opt"
    assert cache.cache_root() == tmp_path / "env"
    assert cache.default_cache_dir(tmp_path / "t.json") == tmp_path / "env"  # not beside it
    monkeypatch.delenv("TRACEANALYZER_CACHE_DIR")
    assert cache.cache_root() == cache.user_cache_dir()


@pytest.mark.parametrize(("text", "size"), [("5G", 5 << 30), ("500MiB", 500 << 20),
                                            ("1048576", 1 << 20), ("2.5k", 2560), ("0", 0)])
def test_parse_size(text: str, size: int) -> None:
    assert cache.parse_size(text) == size


def test_bad_max_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEANALYZER_CACHE_MAX", "lots")
    with pytest.raises(UsageError, match="TRACEANALYZER_CACHE_MAX"):
        cache.max_bytes()
    monkeypatch.delenv("TRACEANALYZER_CACHE_MAX")
    assert cache.max_bytes() == cache.DEFAULT_MAX_BYTES == 5 << 30


def _entry(root: Path, kind: str, n: int, size: int, age_s: float) -> Path:
    key = f"{n:040x}"
    if kind == "export":
        path = root / cache.EXPORTS_DIR / f"{n:064x}.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
    else:
        path = root / (cache.RESULTS_DIR if kind == "result" else "") / key
        path.mkdir(parents=True)
        (path / "data").write_bytes(b"x" * size)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def test_prune_removes_least_recently_used_first(tmp_path: Path) -> None:
    old = _entry(tmp_path, "frames", 1, 1000, age_s=300)
    mid = _entry(tmp_path, "result", 2, 1000, age_s=200)
    new = _entry(tmp_path, "export", 3, 1000, age_s=100)
    cache.touch(old)  # used just now: now the most recent
    (tmp_path / "notes.txt").write_text("not ours")  # never deleted
    (tmp_path / "results" / "not-a-key").mkdir()
    freed = cache.prune(tmp_path, limit=2000)
    assert freed == 1000
    assert old.exists() and new.exists() and not mid.exists()
    assert cache.prune(tmp_path, limit=0, keep=new) == 1000
    assert new.exists() and not old.exists()
    assert (tmp_path / "notes.txt").exists() and (tmp_path / "results" / "not-a-key").exists()


def test_clear_only_removes_entries(tmp_path: Path) -> None:
    for n, kind in enumerate(("frames", "result", "export")):
        _entry(tmp_path, kind, n, 10, age_s=0)
    (tmp_path / "keep.txt").write_text("mine")
    assert cache.clear(tmp_path) == (3, 30)
    assert list(cache.entries(tmp_path)) == []
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_store_keeps_the_cache_under_its_bound(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path, kineto) -> None:
    from traceanalyzer.ingest import load

    traces = []
    for i in range(3):
        b = kineto.__class__()
        b.step(0, 1000.0, 400.0 + i)
        b.launch(f"void k{i}<float>", 1010.0, 5, 1030.0, 30 + i)
        traces.append(b.write(tmp_path / f"t{i}.json"))
    root = tmp_path / "cache"
    load(traces[0], cache_dir=root)
    one = sum(e.size for e in cache.entries(root))
    monkeypatch.setenv("TRACEANALYZER_CACHE_MAX", str(int(one * 1.5)))
    for t in traces[1:]:
        time.sleep(0.01)  # distinct modification times
        load(t, cache_dir=root)
    kept = list(cache.entries(root))
    assert len(kept) == 1 and sum(e.size for e in kept) <= one * 1.5
