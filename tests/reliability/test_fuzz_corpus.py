"""Rule files and project configs that tools/fuzz.py found breaking the CLI (issue 30): each is
rejected with one line and exit code 2, or accepted, never an internal error or a traceback.
Trace inputs it found live in tests/reliability/corpus/ itself (tests/reliability/test_corpus.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

CORPUS = REPO / "tests" / "reliability" / "corpus"
TRACE = REPO / "sample_traces" / "torch" / "fp32_matmul_bad.json.gz"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceanalyzer", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "TRACEANALYZER_DEBUG": "", "PYTHONPATH": str(REPO)},
    )


def clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode in (0, 2), proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    if proc.returncode == 2:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 400, lines


@pytest.mark.parametrize("rule", sorted((CORPUS / "rules").glob("*.yaml")), ids=lambda p: p.name)
def test_rule_file(rule: Path, tmp_path: Path) -> None:
    clean(run("analyze", str(TRACE), "-qq", "--rules", str(rule), cwd=tmp_path))
    clean(run("rules", "list", "--rules", str(rule), cwd=tmp_path))


@pytest.mark.parametrize("config", sorted((CORPUS / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_project_config(config: Path, tmp_path: Path) -> None:
    clean(run("analyze", str(TRACE), "-qq", "--config", str(config), cwd=tmp_path))
    shutil.copy(config, tmp_path / "traceanalyzer.yaml")  # auto-loaded from the working folder
    clean(run("analyze", str(TRACE), "-qq", cwd=tmp_path))


def test_empty_config_is_no_settings(tmp_path: Path) -> None:
    proc = run(
        "analyze",
        str(TRACE),
        "-qq",
        "--config",
        str(CORPUS / "config" / "empty.yaml"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
