"""Issue 29.6: no colour codes ever (so NO_COLOR holds), progress only on a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.batch.test_run import make_trace
from tests.support.cli import run_cli


def _on_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``traceanalyzer ARGS`` with stderr on a pseudo-terminal; its exit code and what the
    terminal showed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "traceanalyzer", *args], cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower,
                            env={**os.environ, "TERM": "xterm"})
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return proc.wait(timeout=300), shown.decode("utf-8", "replace")


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        make_trace(folder / f"r{i}.json", seed=i)
    return folder


def test_batch_progress_only_on_a_terminal(traces: Path, tmp_path: Path) -> None:
    rc, shown = _on_terminal(["batch", str(traces), "--out", str(tmp_path / "a"), "-j", "1"],
                             tmp_path)
    assert rc == 0
    assert "3/3" in shown and "\r[" in shown
    piped = run_cli("batch", str(traces), "--out", str(tmp_path / "b"), "-j", "1")
    assert piped.returncode == 0
    assert "\r" not in piped.stderr + piped.stdout and "3/3" not in piped.stderr


@pytest.mark.parametrize("no_color", [None, "1"])
def test_no_escape_codes(traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         no_color: str | None) -> None:
    if no_color:
        monkeypatch.setenv("NO_COLOR", no_color)
    for args in (["analyze", str(traces / "r0.json"), "-v"], ["rules", "list"],
                 ["stats", str(traces / "r0.json")]):
        done = run_cli(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout + done.stderr, args


def test_dumb_terminal_gets_no_progress(traces: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from traceanalyzer.cli.common import interactive

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", "dumb")
    assert not interactive(Tty())
    monkeypatch.setenv("TERM", "xterm")
    assert interactive(Tty())
