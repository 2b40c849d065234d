"""Issue 30.4: a FIFO or another special file given as an input is refused at once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import run_cli

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


@pytest.mark.parametrize("command", [["analyze"], ["stats"], ["job"], ["diff", "pipe"]])
def test_fifo_input_refused(tmp_path: Path, command: list[str]) -> None:
    os.mkfifo(tmp_path / "pipe")
    done = run_cli(*command, "pipe", cwd=tmp_path)  # would block forever on open()
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "FIFO" in lines[0] and "pipe" in lines[0]


def test_device_input_refused(tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    done = run_cli("analyze", "/dev/zero", cwd=tmp_path)  # would read for ever
    assert done.returncode == 2
    assert "device" in done.stderr and len(done.stderr.strip().splitlines()) == 1
