"""The command line as a user runs it: ``python -m traceanalyzer`` in a child process."""

from __future__ import annotations

import subprocess
import sys
from os import PathLike


def run_cli(*args: str, cwd: str | PathLike[str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``traceanalyzer ARGS`` and capture its output as text."""
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)
