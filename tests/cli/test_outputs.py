"""Issue 30.2: one output guard for every command and every output, run as a user runs them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.paths import SAMPLES

TRACE = SAMPLES / "torch" / "fp32_matmul_bad.json.gz"
OTHER = SAMPLES / "torch" / "fp32_matmul_good.json.gz"

pytestmark = pytest.mark.skipif(not (TRACE.is_file() and OTHER.is_file()),
                                reason="sample traces missing")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    shutil.copy(TRACE, tmp_path / "before.json.gz")
    shutil.copy(OTHER, tmp_path / "after.json.gz")
    return tmp_path


def refused(done, *words: str) -> None:
    """Exit code 2, one line on stderr naming the problem, nothing on stdout."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def unchanged(path: Path, original: Path) -> None:
    assert path.read_bytes() == original.read_bytes()


@pytest.mark.parametrize("option", ["--json", "--html", "--markdown", "--annotate"])
def test_analyze_output_is_input(work: Path, option: str) -> None:
    refused(run_cli("analyze", "before.json.gz", option, "before.json.gz", cwd=work),
            "input trace")
    unchanged(work / "before.json.gz", TRACE)


def test_analyze_output_is_hard_link_of_input(work: Path) -> None:
    os.link(work / "before.json.gz", work / "alias.json.gz")
    refused(run_cli("analyze", "before.json.gz", "--html", "alias.json.gz", cwd=work),
            "input trace")
    unchanged(work / "before.json.gz", TRACE)


@pytest.mark.parametrize("command", ["diff", "analyze"])
def test_output_through_symlink_to_input(work: Path, command: str) -> None:
    (work / "link.json").symlink_to("after.json.gz")
    args = ["before.json.gz", "after.json.gz"] if command == "diff" else ["after.json.gz"]
    refused(run_cli(command, *args, "--json", "link.json", cwd=work), "symbolic link")
    assert (work / "link.json").is_symlink()
    unchanged(work / "after.json.gz", OTHER)


@pytest.mark.parametrize("option", ["--json", "--html", "--markdown"])
def test_diff_output_is_input(work: Path, option: str) -> None:
    refused(run_cli("diff", "before.json.gz", "after.json.gz", option, "after.json.gz",
                    cwd=work), "input trace")
    unchanged(work / "after.json.gz", OTHER)


@pytest.mark.parametrize("option", ["--json", "--html"])
def test_job_output_is_input(work: Path, option: str) -> None:
    refused(run_cli("job", "before.json.gz", option, "before.json.gz", cwd=work), "input trace")
    unchanged(work / "before.json.gz", TRACE)


def test_job_output_an_input_glob_would_match(work: Path) -> None:
    runs = work / "runs"
    runs.mkdir()
    shutil.copy(TRACE, runs / "rank0.json.gz")
    refused(run_cli("job", "runs/*.json*", "--json", "runs/job.json", cwd=work), "runs/*.json*")
    refused(run_cli("job", "runs", "--json", "runs/sub/job.json", cwd=work), "next time")
    assert not (runs / "job.json").exists()
    done = run_cli("job", "runs/*.json*", "--json", "job.json", cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "job.json").is_file()


def test_stats_output(work: Path) -> None:
    refused(run_cli("stats", "before.json.gz", "-o", "before.json.gz", cwd=work), "input trace")
    unchanged(work / "before.json.gz", TRACE)
    done = run_cli("stats", "before.json.gz", "--format", "csv", "-o", "k.csv", cwd=work)
    assert done.returncode == 0 and done.stdout == ""
    assert (work / "k.csv").read_text().startswith("name,category,instances")
    dash = run_cli("stats", "before.json.gz", "--format", "csv", "-o", "-", cwd=work)
    assert dash.stdout == (work / "k.csv").read_text()


def test_batch_out_may_not_replace_an_input(work: Path) -> None:
    runs = work / "runs"
    runs.mkdir()
    shutil.copy(TRACE, runs / "manifest.json")  # a trace that happens to be called so
    refused(run_cli("batch", "runs", "--out", "runs", cwd=work), "manifest.json", "input trace")
    unchanged(runs / "manifest.json", TRACE)
    assert not (runs / "reports").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_symlink_to_fifo_and_fifo_are_not_replaced(work: Path) -> None:
    os.mkfifo(work / "pipe")
    (work / "out.json").symlink_to("pipe")
    refused(run_cli("analyze", "before.json.gz", "--annotate", "out.json", cwd=work),
            "symbolic link")
    assert (work / "out.json").is_symlink()
    refused(run_cli("analyze", "before.json.gz", "--json", "pipe", cwd=work), "FIFO")
    assert (work / "pipe").is_fifo()


def test_two_outputs_one_file(work: Path) -> None:
    refused(run_cli("analyze", "before.json.gz", "--json", "r.json", "--html", "r.json",
                    cwd=work), "--json r.json")
    assert not (work / "r.json").exists()


def test_outputs_elsewhere_are_written(work: Path) -> None:
    done = run_cli("diff", "before.json.gz", "after.json.gz", "--json", "d.json", cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "d.json").is_file()
