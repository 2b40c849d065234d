"""Issue 29: outputs on standard output, folder hints, --annotate formats, -q/-v."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli

NSYS = Path(__file__).resolve().parents[2] / "sample_traces/programs/nsys/convnet_bf16_range.sqlite"

pytestmark = pytest.mark.skipif(not NSYS.is_file(), reason="sample trace missing")


def test_json_dash_goes_to_stdout(tmp_path):
    done = run_cli("analyze", str(NSYS), "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema_version"] >= 1
    assert "==" in done.stderr  # the summary moved to stderr
    assert not (tmp_path / "-").exists()


def test_markdown_dash_goes_to_stdout(tmp_path):
    done = run_cli("analyze", str(NSYS), "--markdown", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("### traceanalyzer")
    assert not (tmp_path / "-").exists()


def test_folder_names_job_and_batch(tmp_path):
    done = run_cli("analyze", str(tmp_path))
    assert done.returncode == 2
    assert "traceanalyzer job" in done.stderr and "traceanalyzer batch" in done.stderr


def test_annotate_json_from_nsys_refused(tmp_path):
    done = run_cli("analyze", str(NSYS), "--annotate", str(tmp_path / "out.json"))
    assert done.returncode == 2
    assert ".pftrace" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()
    done = run_cli("analyze", str(NSYS), "--annotate", str(tmp_path / "out.txt"))
    assert done.returncode == 2


def test_quiet_and_verbose(tmp_path):
    run_cli("analyze", str(NSYS))
    done = run_cli("analyze", str(NSYS), "-qq")
    assert done.returncode == 0 and done.stdout == ""
    done = run_cli("analyze", str(NSYS), "-v")
    assert "result from the cache" in done.stderr
