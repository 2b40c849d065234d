"""The command line as a user runs it: help, exit codes, one-line errors, outputs."""

from __future__ import annotations

import csv
import io
import json

import click
import pytest

from tests.support.cli import run_cli
from tests.support.paths import PUBLIC
from traceanalyzer.cli.main import cli

SMALL = PUBLIC / "kineto" / "hta_alexnet_sync.json.gz"


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from all_commands(command, (*prefix, name))


@pytest.mark.parametrize("command", list(all_commands(cli)), ids=" ".join)
def test_every_command_has_help(command):
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(result.output.splitlines()) > 3


def test_analyze_real_trace(tmp_path, public_dir):
    out = run_cli("analyze", str(SMALL), "--json", str(tmp_path / "r.json"), "--cache-dir",
              str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr
    assert "GPU busy" in out.stdout and "Top" in out.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["metrics"]["kernel_count"] == 79


@pytest.mark.parametrize("content", [b"", b"garbage\x00\xff", b"\x1f\x8b\x08\x00broken",
                                     b'{"no": "events"}', b'SQLite format 3\x00' + b"\x00" * 200])
def test_bad_input_one_line_exit_2(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    out = run_cli("analyze", str(path), "--html", str(tmp_path / "r.html"), "--no-cache")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and str(path) in out.stderr
    assert not (tmp_path / "r.html").exists()


def test_directory_and_missing_file(tmp_path):
    for arg in (str(tmp_path), str(tmp_path / "missing.json")):
        out = run_cli("analyze", arg)
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_bad_usage_exit_2(tmp_path):
    assert run_cli("analyze").returncode == 2
    assert run_cli("analyze", str(SMALL), "--fail-on", "nonsense").returncode == 2
    assert run_cli("analyze", str(SMALL), "--steps", "x-y").returncode == 2


def test_fail_on_gates_ci(tmp_path, public_dir):
    quiet = run_cli("analyze", str(SMALL), "--no-cache")
    assert quiet.returncode == 0
    gated = run_cli("analyze", str(SMALL), "--no-cache", "--fail-on", "info")
    findings = "Findings (" in quiet.stdout
    assert gated.returncode == (1 if findings else 0)


def test_stats_formats(tmp_path, public_dir):
    out = run_cli("stats", str(SMALL), "--report", "kernels", "--format", "csv", "--no-cache")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert sum(int(r["instances"]) for r in rows) == 79
    for report in ("api", "memops", "nvtx"):
        out = run_cli("stats", str(SMALL), "--report", report, "--format", "json", "--no-cache")
        assert out.returncode == 0 and isinstance(json.loads(out.stdout), list)


def test_steps_window(tmp_path, public_dir):
    path = PUBLIC / "kineto" / "hta_a100_rank3of8_control.json.gz"
    out = run_cli("analyze", str(path), "--steps", "1010", "--no-rules", "--json",
              str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "c"))
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "r.json").read_text())["metrics"]["step_count"] == 1
