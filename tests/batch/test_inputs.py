"""Issues 29.3 and 30.4: what a batch takes as its traces. Globs end through symlink loops, a
trace named twice is analyzed once, and a batch never analyzes its own outputs or annotated
copies."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from tests.batch.test_run import make_trace
from tests.support.cli import run_cli
from traceanalyzer.batch.inputs import expand_inputs, left_out, match_glob, matches_pattern
from traceanalyzer.batch.run import batch_paths


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    folder = tmp_path / "runs"
    (folder / "a" / "b").mkdir(parents=True)
    make_trace(folder / "r0.json", seed=0)
    make_trace(folder / "a" / "r1.json", seed=1)
    make_trace(folder / "a" / "b" / "r2.json", seed=2)
    return folder


def test_symlink_loops_end_and_count_once(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (runs / "a" / "b" / "up").symlink_to("..")  # a loop
    (runs / "a" / "top").symlink_to(runs)  # another: exponential for glob.glob
    (runs / "alias.json").symlink_to("r0.json")
    os.link(runs / "a" / "r1.json", runs / "hard.json")
    monkeypatch.chdir(runs.parent)
    found = expand_inputs(["runs/**/*.json", "runs/r0.json", str(runs / "a")])
    assert len(found) == 3
    assert {os.path.realpath(p) for p in found} == {
        str(runs / "r0.json"), str(runs / "a" / "r1.json"), str(runs / "a" / "b" / "r2.json")}
    assert all(os.path.realpath(p) == p for p in found if "hard" not in p)


def test_match_glob_like_glob(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import glob

    monkeypatch.chdir(runs.parent)
    for pattern in ("runs/*.json", "runs/**/*.json", "runs/a/*/r?.json",
                    str(runs / "**" / "r[01].json")):
        assert match_glob(pattern) == sorted(glob.glob(pattern, recursive=True)), pattern
    # A trailing ** names the folders; the batch takes the traces in them.
    assert match_glob("runs/**") == ["runs", "runs/a", "runs/a/b"]
    assert len(expand_inputs(["runs/**"])) == 3


@pytest.mark.parametrize(("pattern", "path", "hit"), [
    ("runs/*.json", "runs/job.json", True),
    ("runs/*.json", "runs/sub/job.json", False),
    ("runs/**/*.json", "runs/x/y/job.json", True),
    ("runs/**/*.json", "runs/.hidden/job.json", False),
    ("runs", "runs/sub/job.json", True),  # a folder walk takes trace names under it
    ("runs", "runs/sub/index.html", False),
    ("runs/*.gz", "runs/o.json", False),
])
def test_matches_pattern(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pattern: str,
                         path: str, hit: bool) -> None:
    monkeypatch.chdir(tmp_path)
    assert matches_pattern(pattern, path) is hit


def test_rerun_with_out_inside_inputs(runs: Path) -> None:
    first = run_cli("batch", str(runs), "--out", str(runs), "-q")
    assert first.returncode == 0, first.stderr
    manifest = (runs / "manifest.json").read_text()
    again = run_cli("batch", str(runs), f"{runs}/**/*.json", f"{runs}/*", "--out", str(runs))
    assert again.returncode == 0, again.stderr
    assert "3 traces: 0 analyzed, 3 up to date, 0 failed" in again.stdout
    assert "left out" in again.stdout
    assert (runs / "manifest.json").read_text().count('"status": "ok"') == 3
    assert '"failed"' not in (runs / "manifest.json").read_text() and manifest


def test_annotated_copies_are_left_out(runs: Path, tmp_path: Path) -> None:
    for name in ("r0.annotated.json", "r0.annotated.json.gz"):
        done = run_cli("analyze", str(runs / "r0.json"), "--annotate", str(runs / name), "-qq")
        assert done.returncode == 0, done.stderr
        assert left_out(str(runs / name)) == "a copy annotated by traceanalyzer --annotate"
    with gzip.open(runs / "plain.json.gz", "wb") as fh:  # an ordinary gzip trace stays in
        fh.write((runs / "r0.json").read_bytes())
    assert left_out(str(runs / "plain.json.gz")) is None
    paths, excluded = batch_paths([str(runs)])
    assert sorted(Path(p).name for p in paths) == ["plain.json.gz", "r0.json", "r1.json",
                                                    "r2.json"]
    assert len(excluded) == 2
    named, _ = batch_paths([str(runs / "r0.annotated.json")])  # named on its own: analyzed
    assert named == [str(runs / "r0.annotated.json")]


def test_reports_beside_traces_are_left_out(runs: Path) -> None:
    done = run_cli("analyze", str(runs / "r0.json"), "--json", str(runs / "r0.report.json"),
                   "-qq")
    assert done.returncode == 0, done.stderr
    assert left_out(str(runs / "r0.report.json")) == "a traceanalyzer report, not a trace"
    assert left_out(str(runs / "r0.json")) is None
