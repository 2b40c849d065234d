"""The terminal output (traceanalyzer/report/terminal.py) as the command line prints it."""

from __future__ import annotations

from tests.support.cli import run_cli
from tests.support.kineto_builder import KinetoBuilder


def test_terminal_escapes_hostile_names(tmp_path):
    b = KinetoBuilder()
    b.launch("evil\x1b[31mred\x07kernel", 1, 1, 2, 1)
    out = run_cli("analyze", str(b.write(tmp_path / "t.json")), "--no-cache")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
