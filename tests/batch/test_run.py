"""Batch mode: pool and Dask give the same outputs, bad files and dead workers do not stop a
batch, re-runs skip what is up to date, and the index escapes hostile file names."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from tests.support.kineto_builder import KinetoBuilder
from traceanalyzer.batch import expand_inputs, read_manifest, report_name, run_batch
from traceanalyzer.batch.summary import finding_column
from traceanalyzer.errors import UsageError

HOSTILE = "<script>alert('x')&.json"  # "/" cannot be in a file name


def make_trace(path: Path, seed: int, steps: int = 3) -> Path:
    """A small Kineto trace whose numbers depend on ``seed`` (so rows differ per trace)."""
    b = KinetoBuilder()
    t = 1_000.0
    for s in range(steps):
        b.step(s, t, 400.0 + seed)
        for k in range(4):
            ts = t + 10 + k * 60
            b.launch(f"void gemm_kernel_{k}<float>", ts, 5, ts + 20 + seed, 30 + k + seed)
        # a gap the idle rule can see, longer for higher seeds
        t += 400.0 + seed * 50
    return b.write(path)


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    for i in range(7):
        make_trace((folder if i % 2 else folder / "sub") / f"rank{i}.json", seed=i)
    make_trace(folder / HOSTILE, seed=9)
    (folder / "corrupt.json").write_text('{"traceEvents": 5}')  # JSON, but no events array
    (folder / "not_a_trace.json").write_bytes(b"\x00\x01 definitely not a trace")
    # hidden folders (caches) are not inputs
    (folder / ".traceanalyzer-cache").mkdir()
    (folder / ".traceanalyzer-cache" / "meta.json").write_text("{}")
    return folder


def _reports(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "reports").glob("*.json"))}


def test_expand_inputs(inputs: Path, tmp_path: Path) -> None:
    paths = expand_inputs([inputs])
    assert len(paths) == 10
    assert paths == sorted(paths) and all(os.path.isabs(p) for p in paths)
    assert not any(".traceanalyzer-cache" in p for p in paths)
    assert expand_inputs([str(inputs / "sub" / "*.json")]) == sorted(
        str(p) for p in (inputs / "sub").glob("*.json"))
    # the same file through a folder and a glob is analyzed once
    assert len(expand_inputs([inputs, str(inputs / "*.json")])) == 10
    with pytest.raises(UsageError, match="no file matches"):
        expand_inputs([str(tmp_path / "nope*.json")])
    with pytest.raises(UsageError, match="no such file"):
        expand_inputs([tmp_path / "missing.json"])


def test_pool_batch_outputs(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_batch([inputs], out, workers=2, use_cache=False)
    assert (result.analyzed, result.skipped, result.failed) == (8, 0, 2)
    summary = pl.read_csv(out / "summary.csv")
    parquet = pl.read_parquet(out / "summary.parquet")
    assert summary.height == parquet.height == 10
    assert summary["path"].to_list() == sorted(summary["path"].to_list())
    assert parquet.equals(result.summary)
    failed = parquet.filter(pl.col("status") == "failed")
    assert sorted(Path(p).name for p in failed["path"]) == ["corrupt.json", "not_a_trace.json"]
    assert all(e and "\n" not in e for e in failed["error"])
    assert failed["busy_pct"].is_null().all()
    ok = parquet.filter(pl.col("status") == "ok")
    assert ok["format"].unique().to_list() == ["kineto"]
    assert ok["step_count"].to_list() == [3] * 8
    # metrics agree with the per-trace JSON report, field for field
    for row in ok.iter_rows(named=True):
        doc = json.loads((out / row["report"]).with_suffix(".json").read_text())
        for key, value in doc["metrics"].items():
            assert row[key] == value, key
        assert row["findings"] == len(doc["findings"])
        for outcome in doc["rule_outcomes"]:
            fired = sum(f["slug"] == outcome["slug"] for f in doc["findings"])
            assert row[finding_column(outcome["slug"])] == fired
        assert (out / row["report"]).is_file()
    # seeds make traces differ: the summary is not the same row ten times
    assert ok["span_ns"].n_unique() == 8


def test_pool_and_dask_identical(inputs: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    pool_out, dask_out = tmp_path / "pool", tmp_path / "dask"
    run_batch([inputs], pool_out, workers=2, use_cache=False)
    result = run_batch([inputs], dask_out, workers=2, dask="local", use_cache=False)
    assert (result.analyzed, result.failed) == (8, 2)
    assert (pool_out / "summary.csv").read_bytes() == (dask_out / "summary.csv").read_bytes()
    pool_reports = _reports(pool_out)
    assert len(pool_reports) == 8
    assert pool_reports == _reports(dask_out)


def test_rerun_skips_up_to_date(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_batch([inputs], out, workers=2, use_cache=False)
    csv = (out / "summary.csv").read_bytes()
    stamps = {p: p.stat().st_mtime_ns for p in (out / "reports").iterdir()}
    again = run_batch([inputs], out, workers=2, use_cache=False)
    # failed traces are retried (a dead worker may have been transient); good ones are skipped
    assert (again.analyzed, again.skipped, again.failed) == (0, 8, 2)
    assert {p: p.stat().st_mtime_ns for p in (out / "reports").iterdir()} == stamps
    assert (out / "summary.csv").read_bytes() == csv
    # a changed trace is analyzed again, and only that one
    make_trace(inputs / "rank1.json", seed=20)
    changed = run_batch([inputs], out, workers=2, use_cache=False)
    assert (changed.analyzed, changed.skipped) == (1, 7)
    assert (out / "summary.csv").read_bytes() != csv
    # a deleted report is rebuilt
    name = report_name(str(inputs / "rank3.json"))
    (out / "reports" / f"{name}.html").unlink()
    rebuilt = run_batch([inputs], out, workers=2, use_cache=False)
    assert (rebuilt.analyzed, rebuilt.skipped) == (1, 7)
    # other settings (rules off) invalidate every report; --force redoes everything
    assert run_batch([inputs], out, workers=2, use_cache=False, rules=False).analyzed == 8
    assert run_batch([inputs], out, workers=2, use_cache=False, rules=False,
                     force=True).analyzed == 8
    manifest = read_manifest(out)
    assert len(manifest) == 10


def test_index_escapes_hostile_names(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_batch([inputs], out, workers=1, use_cache=False)
    html = (out / "index.html").read_text()
    assert "<script" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&amp;.json" in html
    assert "Content-Security-Policy" in html
    # every link points at a report that exists, with a sanitized name
    hrefs = [part.split('"', 1)[0] for part in html.split('href="')[1:]]
    assert len(hrefs) == 8
    for href in hrefs:
        assert href.startswith("reports/") and "<" not in href
        assert (out / href).is_file()
    # failed traces are listed with their one-line error
    assert "corrupt.json" in html and "not_a_trace.json" in html
    assert html.count('class="failed"') == 2


def test_cli_batch(inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from traceanalyzer.cli.main import main

    def run(*args: str) -> int:
        with pytest.raises(SystemExit) as exit_info:
            main(["batch", *args])
        return int(exit_info.value.code)

    out = tmp_path / "out"
    assert run(str(inputs), "--out", str(out), "-j", "2", "--no-cache") == 0
    captured = capsys.readouterr()
    assert "10 traces: 8 analyzed, 0 up to date, 2 failed" in captured.out
    assert "\r" not in captured.err  # no progress bar off a terminal
    assert run(str(inputs), "--out", str(out), "--no-cache", "--fail-on-error", "-q") == 2
    assert capsys.readouterr().out == ""
    assert run(str(tmp_path / "none*.json"), "--out", str(out)) == 2
    assert "no file matches this pattern" in capsys.readouterr().err


def hanging_report(inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``.nsys-rep`` whose ``nsys export`` never returns (``$NSYS`` names a script that
    sleeps): its worker hangs as on a hung read of a network filesystem. (A FIFO no longer
    does: inputs that are not regular files are refused before they are opened.)"""
    script = tmp_path / "fake-nsys"
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(0o755)
    monkeypatch.setenv("NSYS", str(script))
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(tmp_path / "cache"))
    report = inputs / "hangs.nsys-rep"
    report.write_bytes(b"not really a report, but nsys is asked first")
    return report


def test_fifo_input_fails_at_once(inputs: Path, tmp_path: Path) -> None:
    fifo = inputs / "pipe.json"
    os.mkfifo(fifo)
    result = run_batch([inputs], tmp_path / "out", workers=2, use_cache=False, timeout_s=60)
    assert (result.analyzed, result.failed) == (8, 3)
    row = result.summary.filter(pl.col("path") == str(fifo)).row(0, named=True)
    assert row["status"] == "failed" and "FIFO" in row["error"]


def test_timed_out_worker_is_killed_and_batch_continues(inputs: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--timeout kills a hung worker for real (SIGKILL), which breaks the process pool; the
    batch must rebuild the pool, record the trace as failed and finish the others."""
    fifo = hanging_report(inputs, tmp_path, monkeypatch)
    out = tmp_path / "out"
    result = run_batch([inputs], out, workers=2, use_cache=False, timeout_s=8)
    assert (result.analyzed, result.failed) == (8, 3)
    assert result.pool_restarts >= 1
    row = result.summary.filter(pl.col("path") == str(fifo)).row(0, named=True)
    assert row["status"] == "failed" and "timed out after 8 s" in row["error"]


def _workers_blocked_on_export(script: str) -> list[int]:
    """The batch's workers waiting for the fake ``nsys`` (the parents of its processes)."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(entry.name)] = (ppid, cmdline)
    return [ppid for ppid, cmdline in procs.values()
            if script.encode() in cmdline and ppid in procs
            and procs[ppid][0] == os.getpid() and b"multiprocessing" in procs[ppid][1]]


@pytest.mark.slow
def test_worker_killed_from_outside_is_survived(inputs: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed by someone else (as the OOM killer does): the pool breaks with no known
    culprit, the in-flight traces are re-run one by one, and only the one whose worker dies
    again is recorded as failed."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("needs /proc to find the blocked worker")
    fifo = hanging_report(inputs, tmp_path, monkeypatch)
    script = str(tmp_path / "fake-nsys")
    stop = threading.Event()
    kills: list[int] = []

    def killer() -> None:
        while not stop.is_set():
            for pid in _workers_blocked_on_export(script):
                os.kill(pid, 9)
                kills.append(pid)
            time.sleep(0.2)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = run_batch([inputs], tmp_path / "out", workers=2, use_cache=False)
    finally:
        stop.set()
        thread.join()
    if not kills:
        pytest.skip("could not see the worker waiting for the export")
    assert (result.analyzed, result.failed) == (8, 3)
    row = result.summary.filter(pl.col("path") == str(fifo)).row(0, named=True)
    assert "worker process died" in row["error"]


def test_dask_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, inputs: Path,
                                       tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(UsageError, match=r"pip install 'traceanalyzer\[dask\]'"):
        run_batch([inputs], tmp_path / "out", dask="local")


def test_progress_bar_only_when_enabled() -> None:
    import io

    from traceanalyzer.batch import Progress

    quiet, loud = io.StringIO(), io.StringIO()
    for stream, enabled in ((quiet, False), (loud, True)):
        bar = Progress(3, enabled, stream)
        for failed in (False, True, False):
            bar.update(failed)
        bar.close()
    assert quiet.getvalue() == ""
    text = loud.getvalue()
    assert text.count("\r") == 3 and "3/3, 1 failed" in text and text.endswith("\n")


@pytest.mark.slow
def test_dask_scheduler_address(inputs: Path, tmp_path: Path) -> None:
    """--dask ADDRESS: connect to a running scheduler, as a user with a cluster would."""
    distributed = pytest.importorskip("distributed")
    import logging

    sub = inputs / "sub"
    run_batch([sub], tmp_path / "pool", workers=1, use_cache=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=logging.ERROR) as cluster:
        result = run_batch([sub], tmp_path / "dask", dask=cluster.scheduler_address,
                           use_cache=False)
    assert result.analyzed == 4 and result.failed == 0
    assert _reports(tmp_path / "pool") == _reports(tmp_path / "dask")
    assert (tmp_path / "pool" / "summary.csv").read_bytes() == \
        (tmp_path / "dask" / "summary.csv").read_bytes()


def test_summary_schema_is_fixed() -> None:
    """A batch where everything failed still has every metric column, with its type."""
    from traceanalyzer.batch.summary import metric_columns, summary_frame, trace_row

    failed = summary_frame([trace_row("/b.json", None, None, "/b.json: bad", None)])
    for name, dtype in metric_columns().items():
        assert failed.schema[name] == dtype
    assert failed.schema["span_ns"] == pl.Int64 and failed.schema["busy_pct"] == pl.Float64
    doc = {"trace": {"format": "nsys", "devices": [{"id": 0, "name": "H200"}], "rank": 1,
                     "world_size": 2},
           "metrics": {"span_ns": 10, "busy_pct": 50.0},
           "findings": [{"slug": "gpu-idle-gaps", "severity": "medium"},
                        {"slug": "gpu-idle-gaps", "severity": "high"},
                        {"slug": "hidden-sync", "severity": "low"}],
           "rule_outcomes": [{"slug": "gpu-idle-gaps"}, {"slug": "hidden-sync"},
                             {"slug": "small-grid"}]}
    frame = summary_frame([trace_row("/z.json", "nsys", doc, None, "reports/z.html"),
                           trace_row("/a.json", None, None, "/a.json: bad", None)])
    assert frame["path"].to_list() == ["/a.json", "/z.json"]
    z = frame.row(1, named=True)
    assert (z["findings_gpu_idle_gaps"], z["findings_hidden_sync"], z["findings_small_grid"]) \
        == (2, 1, 0)
    assert z["findings"] == 3 and z["worst_severity"] == "high" and z["device"] == "H200"
    assert frame.row(0, named=True)["findings_small_grid"] is None  # failed: unknown, not 0
