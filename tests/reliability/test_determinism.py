"""Determinism: the same input gives byte-identical JSON, run after run, with or without the
cache, and in the process-pool and Dask batch modes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import PUBLIC, REPO

TRACES = [PUBLIC / "kineto" / "hta_alexnet_sync.json.gz",
          PUBLIC / "kineto" / "tracelens_vllm_decode_cudagraph.json.gz",
          PUBLIC / "nsys" / "nsysai_rtx3080_small.sqlite"]


def traces() -> list[Path]:
    found = [t for t in TRACES if t.is_file()]
    if not found:
        pytest.skip("public traces are not available")
    return found


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "traceanalyzer", *args], capture_output=True,
                          text=True, timeout=600, cwd=REPO, env={**os.environ, **(env or {})})
    assert proc.returncode in (0, 1), proc.stderr
    return proc


@pytest.mark.slow
def test_analyze_json_is_byte_identical_across_runs_and_cache(tmp_path: Path) -> None:
    for trace in traces():
        cache = tmp_path / f"cache-{trace.stem}"
        outs = []
        for i, flags in enumerate((["--no-cache"], ["--no-cache"], ["--cache-dir", str(cache)],
                                   ["--cache-dir", str(cache)])):
            out = tmp_path / f"{trace.stem}-{i}.json"
            cli("analyze", str(trace), "--json", str(out), *flags,
                env={"PYTHONHASHSEED": str(i)})  # set iteration order must not leak out
            outs.append(out.read_bytes())
        assert len(set(outs)) == 1, f"{trace.name}: JSON differs between runs or with the cache"


def _batch_reports(out: Path) -> dict[str, bytes]:
    files = sorted((out / "reports").rglob("*.json"))
    assert files, f"no reports under {out}"
    return {str(p.relative_to(out)): p.read_bytes() for p in files}


@pytest.mark.slow
def test_batch_pool_and_dask_byte_identical(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    inputs = traces()
    names = [str(t) for t in inputs]
    a, b, c = tmp_path / "pool1", tmp_path / "pool2", tmp_path / "dask"
    cli("batch", *names, "--out", str(a), "-j", "2", "--force", "--no-cache", "-q")
    cli("batch", *names, "--out", str(b), "-j", "1", "--force", "--no-cache", "-q")
    cli("batch", *names, "--out", str(c), "--dask", "local", "-j", "2", "--force", "--no-cache",
        "-q")
    ra, rb, rc = _batch_reports(a), _batch_reports(b), _batch_reports(c)
    assert len(ra) == len(inputs)
    assert ra == rb, "pool with 1 and 2 workers differ"
    assert ra == rc, "process pool and Dask differ"


@pytest.mark.slow
def test_batch_report_matches_analyze(tmp_path: Path) -> None:
    """A trace's batch report holds the same analysis as `analyze --json` of it."""
    import json

    trace = traces()[0]
    out = tmp_path / "one.json"
    cli("analyze", str(trace), "--json", str(out), "--no-cache")
    cli("batch", str(trace), "--out", str(tmp_path / "b"), "-j", "1", "--no-cache", "-q")
    (report,) = _batch_reports(tmp_path / "b").values()
    single, batched = json.loads(out.read_bytes()), json.loads(report)
    for key in ("metrics", "findings", "kernels", "steps"):
        assert single[key] == batched[key], key
